"""The shell sandbox: bubblewrap, its helper programs and the egress network, as plain Python.

Infrastructure under the shell handler (`workers.handlers.shell`), with no Django, no Celery
and no import of the apps or of `workers` (import-linter keeps it so); settings come in as
arguments (`workers.shell_sandbox` reads them). One concern per module, imports only going
down this list:

- `options`: ``ShellSandbox``, how the worker runs shell tasks (mode, egress, scratch, bwrap).
- `probe`: whether this host can run the sandbox (``probe_bubblewrap``, ``SandboxStatus``).
- `spawn`: starting a task's process with vfork and stopping all of it (``launch``).
- `argv`: the argv that puts a command in the sandbox (setpriv, prlimit, bwrap).
- `egress`: slirp4netns, the outbound network of an ``egress`` sandbox;
  `egress_filter`: the routes that keep it off private and platform addresses.
- `gate`: the start gate (bwrap's info and block descriptors) the worker opens.
- `files`: the per-run files bwrap copies in, as memfds.
- `profile`: the namespaces, the read-only system view, the generated /etc.
- `seccomp`: the socket filter of a sandbox without network.
- `rlimits`, `identity`, `preexec`: the task's limits and user, and the unsandboxed child's
  pre-exec hook.
- `processes`: what /proc says about a task's processes; `usage`: the CPU and peak memory
  of a sandbox's processes, sampled from its own /proc.
- `tools`: where the helper programs are.
"""
