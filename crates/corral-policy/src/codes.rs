//! The catalog of stable error and finding codes: one place, walked by a test.
//!
//! A code never changes meaning once shipped. Every code has a status (the HTTP status it maps
//! to, or 0 for offline-only codes), a one-line title and a fix. Its documentation id is
//! `docs/errors.md#<code>`; `docs/errors.md` is generated from this table.

/// One entry of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeInfo {
    /// The stable code, `family.name`.
    pub code: &'static str,
    /// The HTTP status the code maps to; 0 when it only appears offline (config, lint).
    pub status: u16,
    /// What the code means, in one line.
    pub title: &'static str,
    /// How to fix it, in one line.
    pub fix: &'static str,
}

macro_rules! catalog {
    ($($ident:ident = $code:literal, $status:literal, $title:literal, $fix:literal;)*) => {
        $(
            #[doc = $title]
            pub const $ident: &str = $code;
        )*
        /// Every code, in catalog order.
        pub const CATALOG: &[CodeInfo] = &[
            $(CodeInfo { code: $code, status: $status, title: $title, fix: $fix },)*
        ];
    };
}

catalog! {
    OP_NOT_ENABLED = "op.not_enabled", 404,
        "the op does not exist or is not enabled for this caller",
        "check the id with `corral describe --effective`; add an allow rule that names it";
    OP_INVALID_ID = "op.invalid_id", 400,
        "the op id is not a valid dotted id",
        "use 1-128 characters of letters, digits, `_`, `-` and `.`";
    POLICY_DENIED = "policy.denied", 403,
        "a deny rule matched this call",
        "remove or narrow the deny rule named in the error, or call with other arguments";
    POLICY_NOT_PERMITTED = "policy.not_permitted", 403,
        "no allow rule covers these arguments",
        "widen the scope of the closest rule named in the error, or call inside it";
    POLICY_SCOPE_REQUIRED = "policy.scope_required", 403,
        "an allow rule mounts an op that takes a path, command or url without that scope",
        "add `paths:`, `commands:` or `urls:` to the rule";
    POLICY_PATH_OUTSIDE_SCOPE = "policy.path_outside_scope", 403,
        "the path is outside every root of the scope",
        "call with a path under one of the roots, or add a root";
    POLICY_PATH_DENIED = "policy.path_denied", 403,
        "the path matches a deny pattern or a protected location",
        "call with another path; /proc, /sys, /dev and corral's state, config and key files are always denied, and `.git`, `.corral` and the config's `protected:` list can't be changed";
    POLICY_PATH_INVALID = "policy.path_invalid", 403,
        "the path argument cannot be checked (empty, NUL byte, or not absolute after anchoring)",
        "pass a plain absolute path, or a path relative to the first root";
    POLICY_READONLY = "policy.readonly", 403,
        "the scope is read-only and the op writes or deletes",
        "set `readonly: false` on the scope, or use a read op";
    POLICY_COMMAND_NOT_ALLOWED = "policy.command_not_allowed", 403,
        "the argv matches no allow pattern of the command scope",
        "add a pattern that pins the arguments, e.g. `pytest tests/...`";
    POLICY_COMMAND_DENIED = "policy.command_denied", 403,
        "the argv matches a deny pattern",
        "call another command; deny patterns beat allow patterns";
    POLICY_SHELL_NOT_ALLOWED = "policy.shell_not_allowed", 403,
        "the call asks for a shell and the scope has `shell: false`",
        "pass `argv` instead of a shell command line";
    POLICY_CWD_OUTSIDE_SCOPE = "policy.cwd_outside_scope", 403,
        "the working directory is outside the command scope",
        "omit `cwd` (the scope's cwd is used) or pass one under it";
    POLICY_URL_NOT_ALLOWED = "policy.url_not_allowed", 403,
        "the url's scheme, host, port or path is outside the url scope",
        "call a url the scope lists, or add its host to `urls.hosts`";
    POLICY_URL_DENIED = "policy.url_denied", 403,
        "the url matches a deny rule",
        "call another url";
    POLICY_PRIVATE_ADDRESS = "policy.private_address", 403,
        "the url points at a loopback, private, link-local or otherwise internal address",
        "call a public address; `block_private: false` lifts this and is a lint error";
    POLICY_METHOD_NOT_ALLOWED = "policy.method_not_allowed", 403,
        "the call's HTTP method is not among the url scope's `methods` (`GET` and `HEAD` when the scope names none)",
        "call with an allowed method, or add the method to the rule's `urls: {methods: [...]}`";
    POLICY_ARG_INVALID = "policy.arg_invalid", 403,
        "an argument the scope checks is missing or malformed, so the check fails closed",
        "pass the argument in the form the op describes";
    POLICY_HOOK_DENIED = "policy.hook_denied", 403,
        "the authorize hook denied the call",
        "see the hook's reason";
    POLICY_HOOK_FAILED = "policy.hook_failed", 403,
        "the authorize hook failed or panicked, so the call is denied",
        "fix the hook; a failing check always denies";
    EGRESS_DENIED = "egress.denied", 403,
        "corral's egress proxy refused a connection a sandboxed program asked for",
        "add `host:port` to the `network: {allow: [...]}` of the rule, custom op or server; an internal address needs an entry naming that address";
    NET_DNS_FAILED = "net.dns_failed", 502,
        "the url's host name could not be resolved",
        "check the host name; corral resolves it once, with the server's resolver";
    NET_CONNECT_FAILED = "net.connect_failed", 502,
        "the remote server could not be reached, or the connection failed before an answer",
        "check the server is up and reachable from corral's host; no proxy is used";
    NET_TOO_MANY_REDIRECTS = "net.too_many_redirects", 502,
        "the url redirected more times than corral follows (5)",
        "call the final url directly";
    NET_BAD_RESPONSE = "net.bad_response", 502,
        "the remote server's answer is unusable (a redirect without a valid url, a broken body)",
        "fix the remote server, or call another url";
    NET_HTTP_STATUS = "net.http_status", 502,
        "the server answered `http.download` with a status other than 2xx, so nothing was saved",
        "check the url (the message names the status); `http.fetch` shows the whole answer";
    ARGS_MISSING = "args.missing", 400,
        "a required argument is missing",
        "pass the argument; `corral describe` lists each op's parameters";
    ARGS_INVALID = "args.invalid", 400,
        "an argument has the wrong type or form",
        "pass the type `corral describe` gives for the parameter";
    ARGS_UNKNOWN = "args.unknown", 400,
        "the op has no parameter of this name",
        "remove the argument or fix its name";
    ARGS_PATH_TOO_LONG = "args.path_too_long", 400,
        "a path argument is longer than the system allows (4096 bytes in all, 255 per component)",
        "shorten the path: at most 4096 bytes (PATH_MAX) and 255 bytes per name (NAME_MAX)";
    POLICY_PATH_ESCAPE = "policy.path_escape", 403,
        "the path resolves outside its root (a symlink or `..` pointing out)",
        "call with a path whose every component stays under the root";
    POLICY_SYMLINK_DENIED = "policy.symlink_denied", 403,
        "the path goes through a symlink and the scope has `symlinks: deny`",
        "call with the real path, or use `symlinks: within`";
    FILES_NOT_FOUND = "files.not_found", 404,
        "no file or directory at that path",
        "check the path with `files.list`";
    FILES_NOT_A_FILE = "files.not_a_file", 409,
        "the path is a directory (or another non-file) where a file is needed",
        "call with the path of a regular file";
    FILES_EXISTS = "files.exists", 409,
        "a file exists at the path, and the call did not ask to replace it",
        "pass `overwrite: true`, or save under another name";
    FILES_NOT_A_DIRECTORY = "files.not_a_directory", 409,
        "the path is not a directory",
        "call `files.list` with a directory";
    FILES_NOT_TEXT = "files.not_text", 409,
        "the file is not UTF-8 text",
        "use `files.download` for binary files";
    FILES_NOT_EMPTY = "files.not_empty", 409,
        "the directory is not empty",
        "delete its entries first";
    FILES_PERMISSION_DENIED = "files.permission_denied", 403,
        "the operating system refused access to the path",
        "check the file's owner and mode";
    FILES_IO = "files.io", 500,
        "the filesystem returned an unexpected error",
        "retry; if it persists, check the server's logs";
    EXEC_SPAWN_FAILED = "exec.spawn_failed", 502,
        "the program could not be started",
        "check the program exists in the sandbox's PATH and is executable";
    EXEC_INVALID = "exec.invalid", 400,
        "the command is empty or contains NUL bytes",
        "pass a non-empty argv";
    EXEC_LOST = "exec.lost", 500,
        "the isolation backend lost track of a run whose program may have started (its helper or child could not be reaped, or its report was not read): what the program did is unknown",
        "check the program's effects before calling again; the server log has the request id (a host out of threads or processes is the usual cause)";
    EXEC_CHANGE_REFUSED = "exec.change_refused", 409,
        "a change a sandboxed program made was not applied to the host (a fifo or device node, a symlink or mount in the way on the host, a layer that could not be read)",
        "write regular files, directories and symlinks only, under directories that are not symlinks on the host";
    EXEC_WRITE_QUOTA = "exec.write_quota", 507,
        "a sandboxed program's changes are over the run's write quota, so the rest were not applied (a sparse file or a hard link counts at its full size)",
        "write less, or raise the quota: `corral run --write-quota 4GiB`, or `limits.write_quota` in the config's `run:` section";
    UPSTREAM_UNAVAILABLE = "upstream.unavailable", 503,
        "the upstream MCP server behind this op is not running (it crashed, or did not start)",
        "retry after the delay in the message (corral restarts it with backoff); `corral serve`'s log says why it stopped";
    UPSTREAM_FAILED = "upstream.failed", 502,
        "the upstream MCP server answered the call with a protocol error, or did not answer in time",
        "check the arguments against the tool's schema (`GET /ops`); the server's log has the upstream's stderr";
    LLM_NOT_CONFIGURED = "llm.not_configured", 503,
        "the LLM proxy (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`, `/v1/models`) has no upstream: the config has no `llm:` section",
        "add `llm: {base_url_env: OPENAI_BASE_URL, api_key_env: OPENAI_API_KEY}` to the config and export both variables";
    LLM_BAD_REQUEST = "llm.bad_request", 400,
        "the model request is not a JSON object with a string `model` and its conversation (`messages` for a chat completion or an Anthropic message, `input` for a Responses request)",
        "send the route's shape: `{\"model\": \"...\", \"messages\": [...]}` (`/v1/chat/completions`, `/v1/messages`) or `{\"model\": \"...\", \"input\": ...}` (`/v1/responses`)";
    LLM_WRONG_API = "llm.wrong_api", 404,
        "the model request's route speaks another API than the provider `llm:` names (`/v1/messages` to an OpenAI provider, or an OpenAI route to `llm.api: anthropic`)",
        "send the route of the provider's API, or set `llm.api` (`openai`, the default, or `anthropic`) to the API the provider speaks";
    LLM_UPSTREAM = "llm.upstream", 502,
        "the model provider answered with an error; its status is kept when it is a client error (400-429)",
        "read the provider's message in `error`; fix the request it names, or retry when the provider recovers";
    LLM_UNREACHABLE = "llm.unreachable", 502,
        "the model provider could not be reached (connection refused, DNS, TLS) or its answer could not be read",
        "check the url in the variable `llm.base_url_env` names, and that the provider is up";
    LLM_TIMEOUT = "llm.timeout", 504,
        "the model provider did not answer in time",
        "retry; ask for fewer tokens, or use a faster model";
    AGENTS_SESSION_GATE = "agents.session_gate", 403,
        "the adapter's `agents.<a>.sessions.create` is allowed but the generic gate `agents.sessions.create` is not: a session needs both",
        "add `agents.sessions.create` to an allow rule reaching this caller (or remove the deny that hits it)";
    AGENTS_MODEL_NOT_ALLOWED = "agents.model_not_allowed", 403,
        "the model the session asks for is not in the agent scope's `models` list",
        "ask for a model the scope lists, or add it to `agents.models` of the rule";
    AGENTS_WORKDIR_OUTSIDE = "agents.workdir_outside", 403,
        "the session's workdir is not beneath the agent scope's `workdir` (or cannot be checked)",
        "omit `workdir` (the scope's is used) or pass a directory beneath it";
    AGENTS_READ_ONLY = "agents.read_only", 403,
        "the agent scope that allowed this call lets the agent change nothing (`permissions: read-only`): a held change cannot be applied under it",
        "apply it under a rule whose agent scope lets the agent write (`permissions: workspace-write`), or leave the hold unapplied";
    AGENTS_MAX_TURNS = "agents.max_turns", 429,
        "the session has taken the agent scope's `max_turns` model turns",
        "start a new session, or raise `agents.max_turns` of the rule";
    ISOLATION_UNAVAILABLE = "isolation.unavailable", 503,
        "the configured isolation backend cannot run on this host; corral never falls back",
        "run `corral doctor` and install the missing primitive, or configure another backend";
    AUTONOMY_BLOCKED = "autonomy.blocked", 403,
        "the autonomy level in force (process, principal pin or run) does not let this op run",
        "call an op of a lower tier, or raise `autonomy:` (or the principal's pin) in the config";
    RBAC_DENIED = "rbac.denied", 403,
        "the caller's role is below the role the op's tier (or its override) needs",
        "call as a principal with the role the error names (viewer < operator < admin)";
    BUDGET_EXHAUSTED = "budget.exhausted", 429,
        "the run has used up one of its budgets (calls, calls per op, wall time, output bytes)",
        "start a new run (another `X-Corral-Run`), or raise the budget the error names";
    BUDGET_TOKENS_EXHAUSTED = "budget.tokens_exhausted", 429,
        "the run has used up its model token budget (`budgets.tokens`), so no model call was forwarded",
        "start a new run (another `X-Corral-Run`), or raise `budgets.tokens`";
    BUDGET_TOKENS_IN_FLIGHT = "budget.tokens_in_flight", 429,
        "another model call of the same run is in flight, and the run has a token budget (`budgets.tokens`): its model calls go one at a time, so each is checked against what the previous ones used",
        "wait for the run's model call in flight to end, then retry (or make the calls in separate runs)";
    AUDIT_NOT_PERMITTED = "audit.not_permitted", 403,
        "reading the audit log (`GET /audit`, `corral audit`) needs role admin",
        "call with a token whose roles include `admin`";
    RUN_SCOPE_MISMATCH = "run.scope_mismatch", 403,
        "the token is scoped to one run and `X-Corral-Run` names another",
        "drop `X-Corral-Run` (the token's run applies to every call it makes), or use a token of the run you named";
    RUN_INVALID_HEADER = "run.invalid_header", 400,
        "`X-Corral-Run`, `X-Corral-Autonomy`, `X-Corral-Dry-Run` or `X-Corral-Record` is malformed",
        "send a run id of 1-128 characters of letters, digits, `_`, `-`, `.` and `:`; a level `L0`-`L4`; dry-run `true` or `false`; record `on` or `off`";
    CONFIRMATION_REQUIRED = "confirmation.required", 202,
        "the op's tier needs a human's approval of this exact call before it runs",
        "approve with `POST /confirmations/{action_id}/decision {\"decision\":\"approve\"}` as the requester, then retry the same call with the same arguments";
    CONFIRMATION_DENIED = "confirmation.denied", 403,
        "a human denied this exact call",
        "call with other arguments, or wait until the denied action expires and ask again";
    CONFIRMATION_NOT_FOUND = "confirmation.not_found", 404,
        "no such pending action for you (unknown, expired, or raised by someone else)",
        "list yours with `GET /confirmations`; only the requester may approve";
    CONFIRMATION_APPROVER_REFUSED = "confirmation.approver_refused", 403,
        "a delegated or service principal tried to approve; only a person may approve",
        "approve as the human requester with their own token (no `act` claim, kind human)";
    CONFIRMATION_STALE_DECISION = "confirmation.stale_decision", 409,
        "the decision is dated before the action was raised, so it cannot be about it",
        "look at the pending action (`GET /confirmations`) and decide again";
    CONFIRMATION_ALREADY_DECIDED = "confirmation.already_decided", 409,
        "the action was already approved or denied",
        "retry the call (approved) or raise a new one (denied, after it expires)";
    CONFIRMATION_IN_PROGRESS = "confirmation.in_progress", 409,
        "the approved call is still running on another request; its outcome is not stored yet",
        "retry the same call shortly to get the stored outcome";
    CONFIRMATION_NOT_REPLAYABLE = "confirmation.not_replayable", 409,
        "the approved call already ran and its result (a byte stream) is not stored",
        "call again after the action expires; a new approval is needed";
    CONFIRMATION_FUTURE_DECISION = "confirmation.future_decision", 400,
        "the decision is dated (`decided_at_ms`) further in the future than the allowed clock skew (5 minutes)",
        "send the decision without `decided_at_ms`, or fix the client's clock";
    CONFIRMATION_ARGS_TOO_LARGE = "confirmation.args_too_large", 413,
        "the call's arguments are too large (over 64 KiB as canonical JSON) for a person to review as a pending action",
        "call with smaller arguments (put large content in a file and pass its path), or get the op exempted with `confirm: never` (confirm tier only)";
    CONFIRMATION_TOO_MANY_PENDING = "confirmation.too_many_pending", 429,
        "the caller already has as many pending actions as `guardrails.max_pending` allows",
        "have a person decide the pending ones (`GET /confirmations` lists them), let them expire (`guardrails.confirmation_ttl`), or raise `guardrails.max_pending`";
    CONFIRMATION_INVALID_DECISION = "confirmation.invalid_decision", 400,
        "the decision body is not `{\"decision\": \"approve\"|\"deny\"}` (with an optional `decided_at_ms`)",
        "send `{\"decision\": \"approve\"}` or `{\"decision\": \"deny\"}` as JSON";
    LIMIT_TOO_LARGE = "limit.too_large", 413,
        "the request or its result is larger than the effective `max_bytes`",
        "ask for less, or raise `max_bytes` in the rule or the global limits";
    LIMIT_BODY_TOO_LARGE = "limit.body_too_large", 413,
        "the request body is larger than the server accepts (1 MiB by default)",
        "send a smaller body";
    LIMIT_RATE = "limit.rate", 429,
        "the caller exceeded the rate limit for this op",
        "retry after the number of seconds in `Retry-After`";
    LIMIT_CONCURRENCY = "limit.concurrency", 429,
        "the caller already has the maximum number of calls to this op in flight",
        "wait for a call to finish, then retry";
    LIMIT_TIMEOUT = "limit.timeout", 504,
        "the op ran past its effective timeout and was stopped (an `http.fetch`); a command that runs past its `timeout` is not this error but a result: `200` with `timed_out: true` and the output so far (`corral call` exits 3)",
        "ask for less work, or raise `timeout`";
    AUTH_MISSING = "auth.missing", 401,
        "the request carries no credentials",
        "send `Authorization: Bearer <token>`";
    AUTH_INVALID = "auth.invalid", 401,
        "the credentials are not valid (unknown token, bad signature, expired)",
        "send a valid token";
    AUTH_CONFLICTING_CREDENTIALS = "auth.conflicting_credentials", 401,
        "`Authorization` and `X-Access-Token` carry different tokens",
        "send one credential";
    ARGS_MALFORMED = "args.malformed", 400,
        "the request body is not a JSON object",
        "send a JSON object of arguments with `Content-Type: application/json`";
    ARGS_UNSUPPORTED_MEDIA_TYPE = "args.unsupported_media_type", 415,
        "the body of an MCP message (`POST /mcp`) is not sent as `application/json`",
        "send the JSON-RPC message with `Content-Type: application/json`";
    SERVER_INTERNAL = "server.internal", 500,
        "the server failed; the details are in its log under the request id",
        "retry; report the request id if it persists";
    SERVER_AUDIT_UNAVAILABLE = "server.audit_unavailable", 503,
        "the audit event could not be stored, so the call was not answered as done",
        "check the storage backend; corral does not answer a call it could not audit";
    MCP_HOST_NOT_ALLOWED = "mcp.host_not_allowed", 403,
        "the request's `Host` (or `Origin`) is not one `/mcp` answers: the defence against DNS rebinding",
        "call `/mcp` by a name the config lists in `mcp.allowed_hosts` (`mcp.allowed_origins` for a browser's Origin), or add this one there";
    MCP_NOT_ACCEPTABLE = "mcp.not_acceptable", 406,
        "the MCP client's `Accept` header admits neither JSON nor an event stream, the only answers `/mcp` gives",
        "send `Accept: application/json, text/event-stream` (or omit `Accept`)";
    ROUTE_NOT_FOUND = "route.not_found", 404,
        "no such route; op calls are `POST /ops/{id}`",
        "see `GET /openapi.json` for the routes";
    ROUTE_METHOD_NOT_ALLOWED = "route.method_not_allowed", 405,
        "the route exists but not with this method",
        "op calls are `POST`; listings are `GET`";
    CONFIG_OPEN_MODE_REFUSED = "config.open_mode_refused", 0,
        "no auth is configured and the server would be reachable beyond loopback, or would mount exec or admin ops",
        "add `auth.tokens` (or JWT), listen on 127.0.0.1, or pass `--allow-open` knowingly";
    STORE_UNAVAILABLE = "store.unavailable", 503,
        "the storage backend cannot be reached or opened",
        "check `storage.url` (or the state directory) and that the database is up";
    STORE_MIGRATION_FAILED = "store.migration_failed", 503,
        "the storage schema could not be brought up to date",
        "check the database user may create tables; see the server log";
    STORE_QUERY_FAILED = "store.query_failed", 503,
        "a storage query failed",
        "retry; see the server log under the request id";
    LAB_NOT_FOUND = "lab.not_found", 404,
        "no lab scenario, run or comparison has this id in your tenant",
        "check the id with `corral sandbox scenarios list` or `corral sandbox runs get`; rows of another tenant are never shown";
    LAB_SCENARIO_TOO_LARGE = "lab.scenario_too_large", 413,
        "the scenario's name, description, steps and mocks together are over 1 MiB as stored JSON",
        "split the scenario into smaller ones, or shorten its mocked responses";
    LAB_OUTPUT_TOO_LARGE = "lab.output_too_large", 413,
        "a step's recorded input and output together are over 1 MiB",
        "have the agent answer with less; the run records the step as an error";
    LAB_RUN_OUTPUT_TOO_LARGE = "lab.run_output_too_large", 413,
        "a run's outputs together (every step's input and output, over all trials) reached the per-run cap of 64 MiB that a run may hold in memory and store: the run stopped at the step named and is recorded `failed`, an infrastructure limit rather than the agent's failure",
        "ask for fewer `trials`, split the scenario into fewer steps, or mock smaller answers; the outputs before that step are kept";
    LAB_SCENARIO_IN_USE = "lab.scenario_in_use", 409,
        "the scenario has runs, so it cannot be deleted (runs and comparisons refer to it)",
        "keep the scenario, or create a new one and stop using this one";
    LAB_VERSION_CONFLICT = "lab.version_conflict", 409,
        "the scenario was changed by someone else since you read it",
        "read it again (`corral sandbox scenarios get`), reapply your change and update with the new version";
    LAB_RUN_FINISHED = "lab.run_finished", 409,
        "the run has already finished (completed, failed or cancelled); a run finishes once and then takes no more outputs",
        "start a new run";
    LAB_INTERRUPTED = "lab.interrupted", 503,
        "the process executing a lab run or shadow evaluation stopped before it finished (found when a corral process starts, or as it shuts down)",
        "run it again; its partial outputs and report are kept as they were";
    LAB_DUPLICATE_OUTPUT = "lab.duplicate_output", 409,
        "an output for this run, trial and step is already recorded; outputs are append-only",
        "record each (trial, step) of a run once";
    LAB_INVALID_RECORD = "lab.invalid_record", 500,
        "the lab asked the store to keep an inconsistent record (a pass without a scorer, a step numbered 0, a score that is not a finite number, ...)",
        "this is a bug in corral; report it with the message";
    AGENTS_NOT_FOUND = "agents.not_found", 404,
        "no saved agent or agent session has this id in your tenant, or it is not yours to read",
        "list yours (`GET /v1/agents`, `GET /v1/agents/sessions`) to find its id";
    AGENTS_SESSION_BUSY = "agents.session_busy", 409,
        "the agent session has a turn running (a session runs one turn at a time), or it has failed",
        "wait for `agent.session.idle` on the session's event stream, or cancel the turn; a failed session takes no more turns: start a new one";
    AGENTS_SESSION_FULL = "agents.session_full", 413,
        "the agent session holds its cap of 10,000 events, or one event is over 64 KiB",
        "start a new session; the events kept so far stay readable";
    AGENTS_QUOTA = "agents.quota", 429,
        "the caller has as many agent sessions (or saved agents) as one owner may keep",
        "delete the ones you no longer need (`DELETE /v1/agents/sessions/{id}`, `DELETE /v1/agents/{id}`), then try again";
    AGENTS_INVALID = "agents.invalid", 400,
        "an agent or session request is malformed (an empty or oversized prompt, a relative workdir, a NUL character in an identifier)",
        "send a non-empty prompt within its size limit, an absolute workdir, identifiers without NUL characters";
    AGENTS_INTERRUPTED = "agents.interrupted", 503,
        "the process running the session's turn stopped before the turn finished (found when a corral process starts, or as it shuts down)",
        "the session is failed; start a new session (its events so far are kept)";
    AGENTS_HOLD_NOT_FOUND = "agents.hold_not_found", 404,
        "the agent session holds no changes under this id: applied already, never held, or its session was deleted (holds are kept in the store, so any replica applies them)",
        "take the id from the session's `writes_held` event (`held_writes` item); an applied hold is gone, and its `writes_applied` event says what it did";
    AGENTS_HOLD_APPLYING = "agents.hold_applying", 409,
        "a hold of the agent session is being applied (on this replica or another), so this hold is not applied now; one hold of a session is applied at a time",
        "wait for the session's `writes_applied` event and try again; a replica that stopped mid-apply frees the hold within 15 minutes";
    AGENTS_HOLD_TOO_LARGE = "agents.hold_too_large", 413,
        "the turn's changes outside the scope's `confirm_writes_outside` directories are over what one hold keeps (64 MiB of content, 20,000 entries): they were not applied and were not kept",
        "have the agent make smaller changes per turn, or list the directory it writes in `confirm_writes_outside` so its changes apply as usual";
    AGENTS_HOLD_INVALID = "agents.hold_invalid", 422,
        "a held change cannot be kept or rebuilt: a name that is not UTF-8, a path that is not a plain relative one, an entry that is neither a file, a directory nor a symlink (a held turn's changes are then not kept; a stored hold is then not applied)",
        "have the agent use UTF-8 file names and plain files; a stored hold that fails this check was altered outside corral: discard it by deleting the session";
    AGENTS_CANCELLED = "agents.cancelled", 409,
        "the agent session's turn was cancelled (`agent.session.input.cancel`) before it finished",
        "send the next message to the session; what the turn did before the cancel stays in its events";
    AGENTS_INSTALLING = "agents.installing", 202,
        "the adapter's CLI is being installed (install mode `lazy` started it on first use); the call was not run",
        "ask again after the `Retry-After` seconds the answer gives, or install ahead with `corral agents prepare`";
    AGENTS_NOT_INSTALLED = "agents.not_installed", 503,
        "the adapter's CLI is not installed and the install mode (`build` or `offline`) may not fetch it",
        "run `corral agents prepare <adapter>` (at image build time), or set `install: {mode: lazy}`";
    AGENTS_INSTALL_OFF = "agents.install_off", 503,
        "the install mode is `off`: agents never run in this deployment",
        "set `install: {mode: lazy}` (or `build` and run `corral agents prepare`)";
    AGENTS_INSTALL_FAILED = "agents.install_failed", 502,
        "`npm install` of the adapter's CLI failed (the message quotes the end of npm's output)",
        "check the host reaches the npm registry and has `npm`; `corral doctor` shows what is missing";
    AGENTS_SANDBOX = "agents.sandbox", 503,
        "the agent's CLI could not be run in the sandbox (the isolation backend refused or failed)",
        "run `corral doctor`: agent sessions need the `linux` isolation backend and its primitives";
    AGENTS_OUTPUT = "agents.output", 502,
        "the agent's output broke a rule (a line over its limit, bytes that are not UTF-8, JSON of no known shape, too many events); reported as an event, never fatal to corral",
        "nothing to fix in corral: the event says what was dropped; update the adapter's CLI if it persists";
    AGENTS_TURN_FAILED = "agents.turn_failed", 502,
        "the agent's turn ended badly: its CLI exited non-zero or was killed by a signal or a limit",
        "read the turn's `error` event (it quotes the end of the CLI's stderr); raise the scope's limits if one was hit";
    AGENTS_TIMEOUT = "agents.timeout", 504,
        "the agent's turn was killed at its time limit",
        "ask for a smaller task, or raise the session's time limit";
    AGENTS_AGENT_ERROR = "agents.agent_error", 502,
        "the agent itself reported an error (codex's `error` items, claude's failed results)",
        "read the event's message: it is the agent's own (often its model provider's) error";
    AGENTS_NO_STORE = "agents.no_store", 503,
        "agent sessions need a store (their state and events are kept there) and this server has none",
        "configure `store:` (SQLite or PostgreSQL) in the config";
    AGENTS_ADAPTER_REQUIRED = "agents.adapter_required", 400,
        "the request does not say which agent adapter runs it and the server has no default",
        "call `/agents/<adapter>/v1/...`, send `X-Corral-Adapter: codex`, use the adapter's name as `model`, or set `agents: {default: codex}`";
    AGENTS_ENVIRONMENT_UNSUPPORTED = "agents.environment_unsupported", 400,
        "the session asks for an environment other than `self_hosted`: corral hosts agents itself, in its sandbox",
        "send `environment: {type: self_hosted, workspace_directory: <dir>}` (or omit it)";
    LAB_SCENARIO_INVALID = "lab.scenario_invalid", 422,
        "a scenario is malformed: not an object, a missing or unknown key, a value of the wrong type",
        "write `{name, description?, steps: [{input, expected?}], mocks: [...]}`";
    LAB_SCENARIO_NO_STEPS = "lab.scenario_no_steps", 422,
        "a scenario has no steps, so a run of it would judge nothing",
        "add at least one step: `steps: [{\"input\": \"...\"}]`";
    LAB_MOCK_AMBIGUOUS = "lab.mock_ambiguous", 422,
        "a mock names both a `resource` and an `op`, so it is unclear what it answers",
        "split it in two mocks: `{resource, response}` for the identity agent, `{op, args, response}` for an op";
    LAB_MOCK_INVALID = "lab.mock_invalid", 422,
        "a mock is malformed: no `resource` or `op`, no `response` or `error`, a resource response that is not a string, or an error code corral does not know",
        "write `{resource, response: \"text\"}`, `{op, args, response}` or `{op, args, error: {code, message}}` with a code from docs/errors.md";
    LAB_MOCK_DUPLICATE = "lab.mock_duplicate", 422,
        "two mocks answer the same resource, or the same op with the same canonical arguments",
        "keep one of them: a call has exactly one mocked answer";
    LAB_MOCK_MISS = "lab.mock_miss", 404,
        "a simulated step asked for a resource, or called an op with arguments, that no mock of the scenario answers; nothing real was reached",
        "add a mock for exactly that resource (newlines included) or that op and canonical arguments, or fix the step";
    LAB_RESERVED_OP = "lab.reserved_op", 409,
        "the deployment already has an op the lab adds to its worlds (`scenario.resource`), so no simulation can run over it",
        "rename or remove that op in the config";
    LAB_WORKFLOW_INVALID = "lab.workflow_invalid", 422,
        "a declarative workflow is malformed (YAML, a missing or unknown key, a value of the wrong type, an unknown op, a repeated `as`)",
        "fix the workflow at the line and column the message gives";
    LAB_WORKFLOW_STREAMED_OP = "lab.workflow_streamed_op", 422,
        "a workflow step names an op that answers a stream (`files.download`: a file's bytes with its content type), not JSON, so no later step or `output` template could use its answer",
        "read text with `files.read` instead (its answer is `{content, ...}`), or drop the step";
    LAB_WORKFLOW_TEMPLATE = "lab.workflow_template", 422,
        "a workflow template is malformed or refers to something it cannot see (an unclosed `{{`, an unknown name, a step not run before it)",
        "use `{{input}}`, `{{steps.<as>}}` or `{{steps.<as>.<field>}}` of an earlier step";
    LAB_SYNTHETIC_COUNT = "lab.synthetic_count", 400,
        "the synthetic-input count is 0 or over 100",
        "ask for 1 to 100 samples (`--count`, `count`); omit it for 10";
    LAB_SYNTHETIC_SUBJECT_TOO_LONG = "lab.synthetic_subject_too_long", 400,
        "the synthetic-input subject kind is over 200 characters",
        "use a shorter subject kind (`--subject-kind`, `subject_kind`); omit it for `agent`";
    LAB_SYNTHETIC_TEMPLATE_TOO_LONG = "lab.synthetic_template_too_long", 400,
        "the synthetic-input template (the seed file) is over 8192 characters",
        "shorten the template (`--seed-file`, `seed`); omit it for `{{subject_kind}}-sample-{{index}}`";
    LAB_SYNTHETIC_TEMPLATE_NOT_TEXT = "lab.synthetic_template_not_text", 400,
        "the synthetic-input template (the seed file) is not UTF-8 text",
        "save the seed file as UTF-8";
    LAB_SYNTHETIC_INPUT_TOO_LONG = "lab.synthetic_input_too_long", 422,
        "a generated input is over 8192 bytes once its subject kind and index are substituted",
        "shorten the template or the subject kind; the request was rejected whole";
    LAB_SYNTHETIC_BATCH_TOO_LARGE = "lab.synthetic_batch_too_large", 422,
        "the generated batch, encoded as a scenario create request with room for its name, description and subject kind, is over the 1 MiB request limit",
        "ask for fewer samples or use a shorter template; the request was rejected whole";
    LAB_SCORER_UNKNOWN = "lab.scorer_unknown", 422,
        "the scorer named is not a built-in scorer",
        "use `exact`, `regex` or `json_path`";
    LAB_EXPECTED_INVALID = "lab.expected_invalid", 422,
        "a step's expected value does not fit its scorer (a regex that does not compile, a `json_path` expectation without `path` and `value`, a path that is not a JSON Pointer or a singular JSONPath)",
        "fix the step's `expected`: a string for `exact` and `regex`, `{\"path\": \"$.a.b\", \"value\": ...}` for `json_path`";
    LAB_COMPARE_INVALID = "lab.compare_invalid", 422,
        "the two sides of a comparison do not pair up (no scenarios, a scenario on one side only or twice, a score outside [0, 1], more passes or errors than trials)",
        "compare runs of the same scenarios with the same trials, one result per scenario and side";
    LAB_DISABLED = "lab.disabled", 404,
        "the lab is turned off in this deployment's config (`sandbox.enabled: false`); stored scenarios and runs are kept",
        "set `sandbox.enabled: true` in the config (or remove the key) and reload to turn it on";
    LAB_ISOLATION_UNSUPPORTED = "lab.isolation_unsupported", 422,
        "a run asked for an isolation its agent cannot use: the identity agent and workflows run in-process against mocks (`inproc-mock`), and an external program runs only in the `linux` backend",
        "omit `isolation`: each variant gets the one it runs under (`inproc-mock` for the identity agent and workflows, `linux` for a program)";
    REPLAY_UNSAFE_OP = "replay.unsafe_op", 422,
        "a variant given to a sandboxed replay declares a tool whose replay safety class is unsafe (it changes something outside the run's ephemeral workspace); nothing was run",
        "remove the tool from the variant (its workflow steps or its `tools:` list), or replay a variant that only reads";
    REPLAY_UNKNOWN_OP = "replay.unknown_op", 422,
        "a variant given to a sandboxed replay declares a tool that is no op of the deployment; nothing was run",
        "fix the tool's name; `GET /ops` lists the ops";
    REPLAY_DIVERGENCE = "replay.divergence", 404,
        "a replayed run made a call its recording lacks (another op, other arguments, or one call too many); nothing real was reached, and the run went on",
        "expected when the variant differs from what was recorded: the replay reports each divergence with its step, op, arguments hash and the call the recording expected there";
    REPLAY_TOOLS_UNDECLARED = "replay.tools_undeclared", 422,
        "an external program given to a shadow evaluation declares no `tools:` list, so what it may call is unknown and it cannot be checked before it runs; nothing was run",
        "add `tools: [op, ...]` (the ops it calls, all replay-safe) to its entry under `sandbox.programs` in the config";
    REPLAY_CONFIRM_NEEDED = "replay.confirm_needed", 409,
        "a shadow evaluation of N variants x M tasks is N*M full agent runs, over the threshold that must be announced; nothing was run",
        "send `expected_runs` equal to N*M (the count in the message), or `corral sandbox shadow run ... --yes` after reading it";
    REPLAY_VARIANT_INVALID = "replay.variant_invalid", 422,
        "a shadow evaluation's variant is neither a workflow nor a declared program (the identity agent only answers from mocks, which a replay does not have); nothing was run",
        "give each variant a `workflow` (YAML) or a `program` (a name under `sandbox.programs`)";
    REPLAY_NO_INPUT = "replay.no_input", 409,
        "the recording kept no task input (or one that is not `{steps: [{input, expected?}]}`), so there is no task to re-run",
        "record lab runs with `sandbox: {record_runs: true}`, or set a live session's input with `PUT /v1/sandbox/recordings/{run}/input` before replaying it";
    LAB_PROGRAM_UNKNOWN = "lab.program_unknown", 422,
        "a variant or scorer names an external program the config does not declare (programs run only if `sandbox.programs` or `sandbox.scorers` names them)",
        "declare it in the config (`sandbox: {programs: {NAME: {command: [...], read_paths: [...]}}}`, or `scorers:` for a scorer) and reload, or use a declared name";
    LAB_PROGRAM_FAILED = "lab.program_failed", 502,
        "the variant's external program exited with a non-zero status or was killed by a signal (the message has its status and the end of its stderr)",
        "fix the program; it reads the step's input on stdin, calls ops at `$CORRAL_URL` with `$CORRAL_TOKEN`, prints its answer and exits 0";
    LAB_PROGRAM_TIMEOUT = "lab.program_timeout", 504,
        "the variant's external program did not finish a step within its timeout and was killed",
        "make the program faster, or raise `timeout` of its entry under `sandbox.programs`";
    LAB_PROGRAM_OUTPUT = "lab.program_output", 502,
        "an external program (a variant or a scorer) printed what corral cannot use: an answer over 1 MiB or not UTF-8, or a scorer's line that is not `{\"score\": 0..1, \"pass\": bool}`",
        "print the answer as UTF-8 text (a scorer: one JSON object `{\"score\": <0..1>, \"pass\": <bool>}`)";
    LAB_SCORER_FAILED = "lab.scorer_failed", 502,
        "the external command scorer exited with a non-zero status, timed out or could not run; the run is recorded failed (corral's side, not the agent's)",
        "fix the scorer; it reads `{input, output, expected}` as JSON on stdin and prints `{\"score\": <0..1>, \"pass\": <bool>}`";
    LAB_INSPECT_LOG_INVALID = "lab.inspect_log_invalid", 400,
        "an Inspect AI eval log cannot be read (not a `.eval` zip, a missing or malformed entry, a sample without a score)",
        "pass `.eval` files written by `inspect eval` whose samples were scored";
    LAB_TOURNAMENT_MISMATCH = "lab.tournament_mismatch", 422,
        "the runs of a tournament are not all of the same scenario at the same version (the message names the first that differs), so their outputs are not answers to the same tasks",
        "name runs of one scenario and version (`corral sandbox runs list --scenario ID` lists them), one per variant";
    LAB_TOURNAMENT_RUN_INCOMPLETE = "lab.tournament_run_incomplete", 409,
        "a run of a tournament did not complete (it is still running, or failed), so it has no answer to every task",
        "wait for it to finish, or leave it out and name a completed run of that variant";
    LAB_JUDGE_FAILED = "lab.judge_failed", 502,
        "the external command judge exited with a non-zero status, timed out or could not run; the judgment is counted as an error and reported, never as a tie",
        "fix the judge; it reads `{input, first, second, expected}` as JSON on stdin and prints one line `{\"prefer\": \"first\" | \"second\" | \"tie\"}`";
    LAB_JUDGE_ANSWER = "lab.judge_answer", 502,
        "the external command judge printed something other than one line `{\"prefer\": \"first\" | \"second\" | \"tie\"}`; the judgment is counted as an error and reported, never as a tie",
        "make the judge print exactly one JSON object `{\"prefer\": ...}` with one of the three answers, and nothing else on stdout";
    LAB_JUDGE_CEILING = "lab.judge_ceiling", 429,
        "a tournament reached its ceiling of judge calls (`budgets.judge`): the pairs left were not judged, and the answer lists each one",
        "raise the judge ceiling, or judge fewer runs or a scenario with fewer steps";
    RECORDING_NOT_FOUND = "recording.not_found", 404,
        "no recording of this run id in your tenant",
        "check the run id with `corral sandbox recordings list`; recordings of another tenant are never shown, and expired ones are deleted";
    RECORDING_FORBIDDEN = "recording.forbidden", 403,
        "a recording holds call values: reading it needs the `admin` role or the run's own principal",
        "ask an admin, or read it with the credentials of the principal whose run it is";
    RECORDING_NOT_ALLOWED = "recording.not_allowed", 403,
        "`X-Corral-Record: on` needs the `admin` or `operator` role",
        "drop the header, call with an operator's or admin's credentials, or use a run-scoped token with `record: true`";
    RECORDING_HEADER_INVALID = "recording.header_invalid", 400,
        "`X-Corral-Record: on` asks to record a call that names no run",
        "send `X-Corral-Record: on` with an `X-Corral-Run` header (or a run-scoped token)";
    RECORDING_UNAVAILABLE = "recording.unavailable", 503,
        "the call asked to be recorded and this corral has no recording store, so it was not run",
        "run the server with its store (the default), or drop `X-Corral-Record` / the token's `record: true`";
    RECORDING_INPUT_SET = "recording.input_set", 409,
        "the recording's task input is already set; it is kept as first given",
        "record the task again under a new run id";
    RECORDING_INPUT_TOO_LARGE = "recording.input_too_large", 413,
        "the task input is larger than a recording's byte cap",
        "shorten the input, or raise `recordings.max_bytes` in the config";
    RECORDING_AMBIGUOUS = "recording.ambiguous", 409,
        "several principals recorded a run under this run id (each has its own recording), and the request names none of them",
        "name the one you mean: `?principal=IDENTITY` (the `identity` the listing shows; or the principal's id when it names one), `--owner IDENTITY` on the CLI";
    RECORDING_LIMIT = "recording.limit", 429,
        "the call is marked for recording and would start a new recording, and the tenant already keeps as many recordings as `recordings.max_per_tenant` allows, or its principal as many as its share `recordings.max_per_principal` allows; the call was not run (never answered unrecorded)",
        "wait for retention to delete old recordings, record under a run id already recorded, ask an admin to delete old ones (`corral sandbox recordings delete RUN`), or raise the limit the message names";
    RECORDING_INVALID = "recording.invalid", 500,
        "a recorded event cannot be stored as given (a NUL in an identifier, a count over the storable)",
        "report it: the gateway builds recorded events itself";
    CONFIG_PARSE = "config.parse", 0,
        "the config file is not valid YAML or JSON",
        "fix the syntax at the position shown";
    CONFIG_IO = "config.io", 0,
        "the config file cannot be read or written",
        "check the path and its permissions";
    CONFIG_VERSION = "config.version", 0,
        "the config has no `version: 1`",
        "add `version: 1` at the top";
    CONFIG_TELEMETRY_EXPORTER = "config.telemetry_exporter", 0,
        "`corral serve` cannot build the OpenTelemetry exporter `telemetry:` asks for",
        "check `telemetry.endpoint` (an `http://` or `https://` URL the HTTP client accepts), or remove `telemetry`";
    CONFIG_UNKNOWN_KEY = "config.unknown_key", 0,
        "the config has a key corral does not know",
        "fix the key's spelling or remove it";
    CONFIG_MISSING_KEY = "config.missing_key", 0,
        "a required key is missing",
        "add the key";
    CONFIG_INVALID_VALUE = "config.invalid_value", 0,
        "a value has the wrong type or form",
        "write the value in the form the message gives";
    CONFIG_UNKNOWN_OP = "config.unknown_op", 0,
        "a selector names an op that does not exist",
        "use an id from `corral describe`";
    CONFIG_UNKNOWN_PRESET = "config.unknown_preset", 0,
        "the preset name is not known",
        "use one of the presets `corral init --help` lists";
    CONFIG_INVALID_SELECTOR = "config.invalid_selector", 0,
        "a selector is not of a known form",
        "write an op id, `ns.*`, `ns.**`, `group:NAME`, `effect:E`, `tier:T` or `*`";
    CONFIG_INVALID_PRINCIPAL = "config.invalid_principal", 0,
        "a principal selector is not of a known form",
        "write `id:NAME`, `role:NAME`, `kind:human|delegated|service` or `*`";
    CONFIG_INVALID_SIZE = "config.invalid_size", 0,
        "a size is not of the form `10MB` or `10MiB`",
        "write an integer and a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB";
    CONFIG_INVALID_DURATION = "config.invalid_duration", 0,
        "a duration is not of the form `90s` or `5m`",
        "write an integer and a unit: ms, s, m, h";
    CONFIG_INVALID_RATE = "config.invalid_rate", 0,
        "a rate is not of the form `10/min`",
        "write a positive integer, `/` and a unit: s, sec, min, h, hour, day";
    CONFIG_INVALID_EGRESS = "config.invalid_egress", 0,
        "a `network:` setting or an egress allow-list entry is malformed",
        "write `network: none`, `network: loopback` or `network: {allow: [\"host:port\", \"*.domain:port\"]}`";
    CONFIG_INVALID_SCOPE = "config.invalid_scope", 0,
        "a scope is malformed (a root that is `/`, relative or has globs; a bad pattern)",
        "fix the scope as the message says";
    CONFIG_INLINE_SECRET = "config.inline_secret", 0,
        "the config holds a secret value",
        "put the secret in an environment variable and name it with `token_env`";
    CONFIG_TOKEN_ENV_UNSET = "config.token_env_unset", 0,
        "a `token_env` names a variable that is unset or empty",
        "export the variable before starting corral";
    CONFIG_TOKEN_TOO_SHORT = "config.token_too_short", 0,
        "a token secret is shorter than 16 characters",
        "use a longer secret, e.g. `openssl rand -hex 24`";
    CONFIG_INVALID_OP = "config.invalid_op", 0,
        "a custom op is malformed (reserved namespace, duplicate id, bad param, lowered tier)",
        "fix the custom op as the message says";
    CONFIG_PROTECTED_WRITABLE = "config.protected_writable", 0,
        "corral's state directory, config file or a key file lies inside a root that a rule lets callers write",
        "move `state_dir` (or the file) out of every writable root, or make that root read-only (`readonly: true`)";
    CONFIG_UNSAFE_REQUIRED = "config.unsafe_required", 0,
        "the setting disables a protection and needs `unsafe: true`",
        "do not; if you must, add `unsafe: true` next to it (it stays a lint error)";
    CONFIG_UNKNOWN_ADAPTER = "config.unknown_adapter", 0,
        "the agent adapter name is not one corral hosts",
        "use `codex` or `claude_code`";
    LINT_ALLOW_ALL = "lint.allow_all", 0,
        "a rule allows `*` outside the full_access preset",
        "list the ops or groups the caller needs";
    LINT_MATCHES_NOTHING = "lint.matches_nothing", 0,
        "a selector matches no op",
        "fix the selector or remove it";
    LINT_SHADOWED_RULE = "lint.shadowed_rule", 0,
        "a rule can never decide a call: an earlier rule always decides first",
        "remove the rule or move it before the rule that shadows it";
    LINT_WRITABLE_SCRIPT = "lint.writable_script", 0,
        "a command runs a file that callers may write",
        "make the file's directory read-only for callers or run a file outside their scope";
    LINT_ROOT_IS_SLASH = "lint.root_is_slash", 0,
        "a path scope has `/` as a root",
        "use the directory the caller needs, e.g. `/workspace`";
    LINT_SYMLINKS_FOLLOW = "lint.symlinks_follow", 0,
        "a path scope follows symlinks out of its roots",
        "use `symlinks: within` (the default) or `deny`";
    LINT_SHELL = "lint.shell", 0,
        "a command scope enables the shell",
        "remove `shell: true` and allow argv patterns";
    LINT_ESCAPE_CAPABLE_COMMAND = "lint.escape_capable_command", 0,
        "an interpreter or an escape-capable tool is allowed with free arguments",
        "pin its arguments (`python3 /workspace/grade.py`) or use a custom op with a fixed argv";
    LINT_PATH_WITHOUT_CWD = "lint.path_without_cwd", 0,
        "a `{path}` pattern has no cwd to jail it",
        "set `cwd:` on the command scope";
    LINT_UNDECLARED_PATH_PARAM = "lint.undeclared_path_param", 0,
        "a custom op takes a path-like parameter that is not typed `path`",
        "declare it `type: path` with a `root:`";
    LINT_CUSTOM_OP_WITHOUT_EFFECTS = "lint.custom_op_without_effects", 0,
        "a custom op declares no effects, so it is treated as admin and explicit-only",
        "declare `effects:`, e.g. `[exec]`";
    LINT_CUSTOM_WRITE_IMPLICIT = "lint.custom_write_implicit", 0,
        "a custom op has the write effect but declares no write path, so its cwd is writable (or, without a cwd, it can write nowhere)",
        "declare `write_paths:` (or a path param with `writable: true`) to say exactly where it writes";
    LINT_OP_CONTAINED = "lint.op_contained", 0,
        "a custom op declares `contained: true`: a claim that its writes land only in the run's ephemeral workspace, which makes an op that only reads and writes replay-safe, so shadow evaluations (replays with the real tools) run it for real; a wrong claim lets a replay write for real where the op writes",
        "keep `contained: true` only if the program writes nowhere but the run's workspace (its `write_paths:`); otherwise remove it, and the op stays out of replays";
    LINT_CUSTOM_PARAM_OUTSIDE_PATHS = "lint.custom_param_outside_paths", 0,
        "a custom op's path param has a root outside its cwd and declared paths, so its program sees only the one file passed",
        "add the param's root to `read_paths:` (or `write_paths:`) if the program needs more of it";
    LINT_UPSTREAM_TOOL_UNDECLARED = "lint.upstream_tool_undeclared", 0,
        "an upstream MCP server's tool has no declared effects, so it is treated as admin and explicit-only",
        "declare it under `mcp_servers.<name>.tools.<tool>` with `effects:`; corral never takes effects from the upstream";
    LINT_RUN_TOKEN_HUMAN = "lint.run_token_human", 0,
        "a run-scoped token (an agent's) is of kind human, so it may approve its own confirmations",
        "set `kind: service` (or `delegated`) on the token: only a human principal's approval counts";
    LINT_OPEN_MODE = "lint.open_mode", 0,
        "no auth tokens are configured: any local process can call the server",
        "add `auth.tokens`; open mode is refused when exec or admin ops are mounted";
    LINT_CONSOLE_SIGN_IN_UNLIMITED = "lint.console_sign_in_unlimited", 0,
        "`console.sign_in_rate: off`: the web console counts no sign-in attempt, so one client may try tokens as fast as the server answers",
        "remove the key (10 a minute) or write a rate such as `console.sign_in_rate: 60/min`";
    LINT_UNREACHABLE_PRINCIPAL = "lint.unreachable_principal", 0,
        "a principal selector names an id or role no token produces",
        "fix the selector or add a token with that id or role";
    LINT_LITERAL_SECRET = "lint.literal_secret", 0,
        "a value looks like a secret written into the config",
        "move it to an environment variable";
    LINT_MUTATING_NAME = "lint.mutating_name", 0,
        "an op whose name carries a mutating verb declares only `read` effects",
        "declare its real effects, or list it under `state_only:` with a reason";
    LINT_STALE_STATE_ONLY = "lint.stale_state_only", 0,
        "a `state_only:` entry names an op that no longer needs it",
        "remove the entry";
    LINT_UNMOUNTED_CUSTOM_OP = "lint.unmounted_custom_op", 0,
        "a custom op is defined but no rule mounts it",
        "allow it by its exact id, or remove it";
    LINT_BLOCK_PRIVATE_OFF = "lint.block_private_off", 0,
        "a url scope lets calls reach private and loopback addresses",
        "remove `block_private: false`";
    LINT_CONFIRM_NEVER = "lint.confirm_never", 0,
        "a rule sets `confirm: never`: its confirm-tier calls run without a human's approval",
        "keep it only for unattended automation, and say why with `reason:` beside it (the finding becomes a note); remove it to have a person approve each call";
    LINT_ROOT_MISSING = "lint.root_missing", 0,
        "a root the config names does not exist on this host: every call under it fails `files.not_found` until it does",
        "create the directory (`mkdir -p <root>`) on the host that serves, or fix the path";
    LINT_RBAC_NO_TIER_ROLE = "lint.rbac_no_tier_role", 0,
        "RBAC by tier is on (a `roles:` block, a token with a tier role, or `auth.jwt`) and a token carries no tier role, so every call it makes is refused",
        "add the tier role its calls need (`viewer`, `operator` or `admin`) to the token's roles";
    LINT_LAB_PROGRAM_UNISOLATED = "lint.lab_program_unisolated", 0,
        "the config declares lab programs (`sandbox.programs`, `sandbox.scorers`) but its isolation backend is not `linux`, the only one they run in: every run naming one is refused",
        "set `isolation: {backend: linux}`, or remove the entries";
    LINT_RAISED_CAP = "lint.raised_cap", 0,
        "a limit raises corral's safe default cap (1 GiB of memory, 1 GiB written per run)",
        "keep it only if the commands need it; remove the key to go back to the default";
    LINT_AGENT_UNCONFINED = "lint.agent_unconfined", 0,
        "an agent scope has `permissions: full`: the agent may change the host beyond its workdir, as far as corral's user may (corral's own files, `.git` internals and `protected:` stay refused)",
        "use `permissions: workspace-write` (the workdir writable, the rest read-only) unless the agent really needs the whole machine";
    LINT_AGENT_PERMISSIONS_IMPLICIT = "lint.agent_permissions_implicit", 0,
        "agents are allowed together with file ops under a `paths:` scope, and the agent scope does not state `permissions`: path scopes do not confine agents",
        "write `permissions: read-only` (or `workspace-write`) in the rule's `agents:` scope, so what the agent may change is stated where it applies";
    LINT_AGENT_HOLDS_UNAPPLIED = "lint.agent_holds_unapplied", 0,
        "an agent scope holds writes for a person (`confirm_writes_outside`), and no allow rule mounts the op that applies them (`agents.<a>.sessions.apply_writes`): what it holds can never reach the workdir",
        "allow `agents.<a>.sessions.apply_writes` (each call is confirmed by a person), or remove `confirm_writes_outside` if nothing outside its directories may ever change";
    LEARNING_PROVIDER_CONVERSATION = "learning.provider_conversation", 400,
        "in learning mode, the root agent's Responses request names a conversation the model provider keeps (`previous_response_id` or `conversation`): the answer guard reads each reply after the history the request itself carries, so it could not see what the learner read before",
        "send the whole conversation in `input` (with `store: false`), as codex does";
    LEARNING_MANIFEST_UNREADABLE = "learning.manifest_unreadable", 500,
        "the scenario manifest (`CORRAL_SCENARIO_MANIFEST`) cannot be read: missing, not a regular file, or larger than 1 MiB",
        "point `CORRAL_SCENARIO_MANIFEST` at the regular JSON file the lab's seeder writes (atomically: a temp file in the same directory, then rename)";
    LEARNING_MANIFEST_SYNTAX = "learning.manifest_syntax", 500,
        "the scenario manifest is not valid JSON, repeats a key, or holds a number out of range",
        "fix the JSON at the line and column named; write NaN, infinities and huge numbers nowhere";
    LEARNING_MANIFEST_SCHEMA = "learning.manifest_schema", 500,
        "a field of the scenario manifest is missing, unknown, of the wrong JSON type or out of range (contract v1)",
        "write `schema_version: 1`, `scenario_id`, `seeded_at` (RFC 3339 with an offset), `default_disclosure` 0-2 and at least one target (`id`, `descriptor`, `value`: a number >= 100 in absolute value or a string of >= 4 characters, optional `unit`), nothing else";
    LEARNING_MANIFEST_VALUE_EXPOSED = "learning.manifest_value_exposed", 500,
        "a target's value appears inside a descriptor, a target id, a unit or the scenario id, which reach the learner, audit lines and /healthz",
        "reword the field named so it does not state the value (digits, separators, k-form or words)";
    LEARNING_FLAG_INVALID = "learning.flag_invalid", 500,
        "`CORRAL_LEARNING_MODE` is set to something other than `true` or `false`",
        "set it to `true`, `false`, or unset it";
    LEARNING_GRACE_INVALID = "learning.grace_invalid", 500,
        "`CORRAL_LEARNING_GRACE_SECONDS` is not a whole number of seconds",
        "set it to a whole number of seconds (3600 by default), or unset it";
    LEARNING_NOT_THIS_ENTRY_POINT = "learning.not_this_entry_point", 500,
        "`CORRAL_LEARNING_MODE=true` is honoured only by `corral serve`; this entry point refuses to start with it",
        "run `corral serve` for a learning lab, or unset `CORRAL_LEARNING_MODE` here";
    LEARNING_PRECONDITION_AUTH = "learning.precondition_auth", 500,
        "learning mode needs authentication: no `auth.tokens` or `auth.jwt` is configured",
        "configure `auth.tokens` or `auth.jwt`, or unset `CORRAL_LEARNING_MODE`";
    LEARNING_PRECONDITION_OPEN_MODE = "learning.precondition_open_mode", 500,
        "learning mode refuses open mode: anonymous callers would share one learner's level",
        "configure tokens so every caller is authenticated, or unset `CORRAL_LEARNING_MODE`";
    LEARNING_PRECONDITION_MANIFEST = "learning.precondition_manifest", 500,
        "learning mode needs a valid scenario manifest at `CORRAL_SCENARIO_MANIFEST`",
        "set `CORRAL_SCENARIO_MANIFEST` to the seeder's manifest and fix the errors listed with it";
    LEARNING_PRECONDITION_AUTONOMY = "learning.precondition_autonomy", 500,
        "learning mode runs at autonomy L2 or lower; the config sets a higher level",
        "set `autonomy: L2` (or lower), or unset `CORRAL_LEARNING_MODE`";
    LEARNING_PRECONDITION_AUDIT = "learning.precondition_audit", 500,
        "learning mode needs the audit on: every withheld answer and hint is an audit event",
        "turn the audit on (`audit:`), or unset `CORRAL_LEARNING_MODE`";
    LEARNING_HINT_NOT_HUMAN = "learning.hint_not_human", 403,
        "only a verified human may take a hint; an agent, a service or an anonymous caller cannot raise a level",
        "press the hint button as the learner (a human token), not from an agent's or a service's token";
    LEARNING_HINT_RATE_LIMITED = "learning.hint_rate_limited", 429,
        "hints are rate-limited per learner and the last one was too recent",
        "wait the seconds named, then ask again";
    LEARNING_HINT_AT_MAX = "learning.hint_at_max", 409,
        "the learner is already at the highest disclosure level (3)",
        "nothing to do: every answer is already shown";
    LINT_FULL_ACCESS = "lint.full_access", 0,
        "the full_access preset (or an `unsafe: true` scope) is in use",
        "use a narrower preset such as workspace_jail";
    UI_SESSION_INVALID = "ui.session_invalid", 401,
        "the web console has no live session for this browser: never signed in, signed out, expired (30 minutes idle, 8 hours at most, or the JWT's `exp`), or the token it was opened with no longer authenticates",
        "sign in again at `/ui/login` with a token the server's config still has";
    UI_CSRF_FAILED = "ui.csrf_failed", 403,
        "a web console form was posted without its session's CSRF token (or with another one), or from another site (`Origin` or `Sec-Fetch-Site` is not this server)",
        "reload the console page and submit its form again; the console's forms work only from its own pages";
    UI_FORM_INVALID = "ui.form_invalid", 400,
        "a web console form is malformed: not `application/x-www-form-urlencoded`, over 16 KiB, or a field missing, repeated or unknown",
        "submit the form from the console's own page, as it is";
    UI_SIGN_IN_RATE_LIMITED = "ui.sign_in_rate_limited", 429,
        "too many web console sign-in attempts: past `console.sign_in_rate` (10 a minute by default) from one client address, or for one presented identity (a JWT's issuer and subject, or the token)",
        "wait the seconds `Retry-After` names, then sign in again; check the token you paste is the right one";
}

/// Whether a failure with `code` happened before the op's program started (the backend cannot
/// run here, the program could not be started, the request to the backend was invalid): nothing
/// ran, so an approval it consumed is given back rather than used up. The backends keep this
/// true: a run they lose track of once its program may have started is `exec.lost`, never one
/// of these.
pub fn before_start(code: &str) -> bool {
    matches!(
        code,
        ISOLATION_UNAVAILABLE | EXEC_SPAWN_FAILED | EXEC_INVALID
    )
}

/// Looks a code up in the catalog.
pub fn lookup(code: &str) -> Option<&'static CodeInfo> {
    CATALOG.iter().find(|c| c.code == code)
}

/// The HTTP status a refusal with `code` answers with: the catalog's. A code the catalog does not
/// know, or one that only appears offline (status 0), answers 500: a server failure, never a
/// status that could pass for a decision.
pub fn status(code: &str) -> u16 {
    match lookup(code) {
        Some(c) if c.status != 0 => c.status,
        Some(_) | None => 500,
    }
}

/// The documentation id of a code.
pub fn doc_id(code: &str) -> String {
    format!("docs/errors.md#{code}")
}

/// The error reference, `docs/errors.md`, generated from the catalog.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Corral error and finding codes\n\n\
         Generated from `crates/corral-policy/src/codes.rs` (`codes::markdown()`); a test keeps \
         this file in step. Every refusal and every `check-config` finding carries one of these \
         codes. Status 0 means the code appears only offline (config loading and lint).\n\n\
         400 means the request does not fit `/openapi.json` (a wrong type, a missing or unknown \
         field, a value out of its range or pattern). 422 means it fits, but its content cannot \
         be processed, which no schema can state: a workflow's YAML that does not load, mocks \
         that answer the same call twice, a name the deployment does not declare. 409 means the \
         world is not in the state the call needs (a file where a directory is needed, a file \
         that exists).\n",
    );
    let mut family = "";
    for c in CATALOG {
        let f = c.code.split('.').next().unwrap_or("");
        if f != family {
            family = f;
            out.push_str(&format!("\n## {f}.*\n"));
        }
        out.push_str(&format!(
            "\n### {}\n\n- status: {}\n- meaning: {}\n- fix: {}\n",
            c.code, c.status, c.title, c.fix
        ));
    }
    out
}
