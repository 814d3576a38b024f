"""A local SMTP receiver: accepts mail (RFC 5321's minimal dialogue) and keeps each message
with its envelope, so a test sees what a mail server would have been handed."""

from __future__ import annotations

import socketserver
import threading
from email import message_from_bytes
from email.message import Message


class SmtpReceiver:
    def __init__(self) -> None:
        self.messages: list[dict] = []
        received = self.messages

        class Handler(socketserver.StreamRequestHandler):
            def _say(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self) -> None:
                self._say("220 localhost ESMTP test receiver")
                sender, recipients = "", []
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    command = line.decode(errors="replace").strip()
                    verb = command.split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        self._say("250 localhost")
                    elif verb == "MAIL":
                        sender = command.split(":", 1)[1].strip(" <>")
                        self._say("250 OK")
                    elif verb == "RCPT":
                        recipients.append(command.split(":", 1)[1].strip(" <>"))
                        self._say("250 OK")
                    elif verb == "DATA":
                        self._say("354 End data with <CR><LF>.<CR><LF>")
                        data = b""
                        while not data.endswith(b"\r\n.\r\n"):
                            chunk = self.rfile.readline()
                            if not chunk:
                                return
                            data += chunk
                        received.append(
                            {
                                "from": sender,
                                "to": list(recipients),
                                "message": message_from_bytes(data[: -len(b".\r\n")]),
                            }
                        )
                        sender, recipients = "", []
                        self._say("250 OK: queued")
                    elif verb == "RSET":
                        sender, recipients = "", []
                        self._say("250 OK")
                    elif verb == "QUIT":
                        self._say("221 Bye")
                        return
                    else:
                        self._say("502 Command not implemented")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def subjects(self) -> list[str]:
        return [str(m["message"]["Subject"]) for m in self.messages]

    def message(self, index: int) -> Message:
        return self.messages[index]["message"]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
