"""What the worker's handlers and the server agree on, in a package that belongs to neither.

- `base`: the contract types (HandlerContext, HandlerOutcome, HandlerConfigError, the
  statuses), secret masking and the in-memory log sink.
- `validation`: handler-config validation (`validate_handler_config`, `HANDLER_TYPES`), run
  by the API when a task is saved and by the worker before each run.
- `registry`: the names of the python callables tasks may run.
- `python_signature`: what a registered callable declares (does it read upstream results).
- `http`: the SSRF-guarded HTTP client: the `http` handler, and `post_json` for the
  server's own webhooks (alerting).
- `ssrf`: the guard itself: which addresses are refused (`blocked_reason`,
  `url_target_refused`, the API's check when a task or channel is saved) and the adapter
  that pins a connection to the checked address.

Plain Python: imports neither Django apps (`scheduler_app`, `dags`) nor `workers`
(import-linter keeps it so). Settings come in as arguments.
"""
