//! The config reference, `docs/CONFIG.md`: rendered from the decoder's own key tables (every
//! key is documented where it is decoded, so the reference cannot miss one or list one the
//! decoder does not read), plus hand-written sections on the syntax the keys share.

use crate::decode::{KeyRow, REGISTRY, Table};

/// The command that rewrites `docs/CONFIG.md`.
pub const REGENERATE: &str = "UPDATE_DOCS=1 cargo test -p corral-config config_md";

const INTRO: &str = "\
This reference is generated from the decoder's own key tables \
(`crates/corral-config/src/decode.rs` and `decode/*.rs`): each key is documented in the table \
that decodes it, so every key the decoder reads is here, and nothing else. Do not edit it by \
hand; regenerate it with `UPDATE_DOCS=1 cargo test -p corral-config config_md` (a test fails \
while it is stale).

A config is YAML or JSON. Every mapping below refuses a key it does not list \
(`config.unknown_key`, naming the closest valid key); the mappings whose keys the config \
chooses (`custom`, `mcp_servers`, `state_only`, `tiers`, `roles.overrides`, \
`budgets.max_calls_per_op`, `env_set`, `params`, `tools`) take any key. In a path, `[]` is an \
item of a list and `<op>` or `<name>` a key the config chooses. `corral check-config` loads a \
file and lints it.

Value types:

- **size**: an integer and a unit, no space: `B`, `KB`, `MB`, `GB`, `TB` (powers of 1000) or \
`KiB`, `MiB`, `GiB`, `TiB` (powers of 1024): `10MB`, `10MiB`.
- **duration**: an integer and `ms`, `s`, `m` or `h`: `90s`, `5m`. Zero is refused, except in \
`budgets`, where `0` disables a budget.
- **rate**: `N/unit`, N at least 1, unit `s` (`sec`, `second`), `min` (`minute`), `h` \
(`hour`) or `day`: `10/min` (see Rates).
- **op selector**: `ns.op` (one op), `ns.*` (ops one level below `ns`), `ns.**` (at any depth), \
`group:NAME`, `effect:EFFECT`, `tier:TIER`, or `*` (every op). Only an exact id mounts an \
explicit-only op.
- **environment variable name**: `[A-Za-z_][A-Za-z0-9_]*`. Secrets and provider urls are \
never written in the config, only the names of the variables holding them.

**Start-up only**: `corral serve` reloads its config file on SIGHUP (`kill -HUP`): rules, ops, \
guardrails, budgets, tokens and JWT, `mcp_servers`, the lab and the agents change without a \
restart. A key marked *yes* is read only when corral starts: a reload keeps its old value. The \
reload log names `storage`, `isolation`, `audit`, `guardrails.confirmations`, `mcp`, \
`recordings` (read when the store opens) and `llm` (read when the HTTP app is built) when they \
changed. A reload that moves `state_dir` is refused, and the running config stays.
";

const GLOBS: &str = "\
## Deny globs

The `deny` patterns of a path scope (`rules[].paths.deny`), a preset's `deny`, and \
`protected` are globs over absolute paths:

- `*` matches any run of characters within one path component, `?` one character; neither \
crosses a `/`.
- `**` matches any number of whole components (`/ws/**/*.key`).
- `[abc]`, `[a-z]`, `[!a]` match one character of (or not of) a class; `{a,b}` either \
alternative.
- A pattern that starts with `/` is matched from the root as written; one that starts with \
`**` as written too. **Any other pattern, with or without a `/` in it, is matched at any \
depth**: it is read as `**/PATTERN`, so `.env` matches `/ws/.env` and `/ws/app/.env`, and \
`secrets/*.txt` matches `/ws/app/secrets/a.txt`.
- A trailing `/` is dropped, and every pattern also covers everything beneath what it \
matches (`PATTERN/**`): `.ssh` denies `/home/u/.ssh/id_ed25519`.

A path is checked twice. First the path the call names, made absolute and normalized \
lexically (`.` and `..` resolved, a relative path anchored at the scope's first root), before \
anything is opened. Then the path as it really resolves once the op has opened it (the real \
path the kernel opened, and the same path re-anchored at the root as configured): **deny \
patterns hold for where a symlink really leads**, so a link to a denied file is refused too \
(`policy.path_denied`). `/proc`, `/sys` and `/dev` are always denied, whatever the patterns.

Presets and `enable` add the default secret patterns `.env`, `.env.*`, `.ssh`, `*.pem`, \
`*.key` and `id_rsa*` to their path scopes; a rule's `paths` has only the patterns it lists.
";

const ROLES: &str = "\
## Role selectors

A rule's `principals` (and an autonomy pin's `principal`) select callers: `id:NAME` (a \
token's `id`, a JWT's `sub`), `role:NAME`, `kind:human`, `kind:delegated`, `kind:service`, or \
`*` (any authenticated caller). A selector never matches the anonymous caller of an open-mode \
server; a rule without `principals` applies to every caller, the anonymous one included.

**`role:NAME` matches a caller whose roles include exactly `NAME`; it knows nothing of the \
tier-role hierarchy.** `principals: [role:operator]` does not match a caller whose only tier \
role is `admin`: write `[role:operator, role:admin]` to admit both.

The hierarchy `viewer < operator < admin` belongs to **RBAC by tier**, a separate step that \
runs before the rules (docs/guardrails.md): the read tier needs `viewer`, the confirm tier \
`operator`, the destructive tier `admin` (or the role `roles.overrides` gives the op), and a \
caller's highest tier role counts, so an `admin` may call what needs `operator`. RBAC by tier \
is on whenever a principal can carry a tier role: a `roles:` block (even empty), a static \
token with `viewer`, `operator` or `admin` among its roles, or `auth.jwt`. Then a caller with \
no tier role is refused every op (`rbac.denied`). A call must pass both: RBAC by tier, then \
the rules, whose `role:` selectors compare names only.
";

const RATES: &str = "\
## Rates

`limits.rate: N/unit` is a **token bucket** per principal id and op, kept in each replica's \
memory (replicas do not share it). The bucket holds at most N tokens and starts full; it \
refills continuously at N per unit (`10/min`: one token every 6 seconds), not in fixed \
windows. A call takes one token; a call that finds less than one is refused with `429 \
limit.rate` and told how long until the next token. So a caller may make a burst of N calls \
at once, then one call per unit/N. A bucket that has refilled is dropped: an idle caller \
costs nothing.

When both the top-level `limits` and the rule that allows the call set a rate, the \
stricter wins. `concurrency` counts the calls of one principal to one op in flight at \
once, per replica, and refuses one more (`429`).
";

const PRESETS: &str = "\
## Presets

`preset: NAME`, `preset: {name: NAME, ...options}` or a list of them \
(`crates/corral-policy/src/presets.rs`). A preset is a few allow rules placed before \
`enable` and `rules`. Every preset but `minimal` needs a `root` (its own, else the top-level \
`root`). Its path scopes carry the default secret deny patterns (`.env`, `.env.*`, `.ssh`, \
`*.pem`, `*.key`, `id_rsa*`) plus its `deny` option, `symlinks: within`, and its `max_bytes`; \
its command scope has `cwd: ROOT` and passes `PATH` and `LANG`.

| preset | ops | scopes and defaults | options |
|---|---|---|---|
| `minimal` | `core.health` | none | none |
| `files_readonly` | `files.list`, `files.stat`, `files.read`, `files.download` | paths: `root`, read-only | `root`, `deny`, `max_bytes` |
| `readonly` | every op with the `read` effect (`effect:read`) | paths: `root`, read-only | `root`, `deny`, `max_bytes` |
| `download_only` | `files.download` | paths: `root`, read-only | `root`, `deny`, `max_bytes` |
| `commands_only` | `commands.run` | commands: `commands` (required), cwd `root` | `root`, `commands` |
| `workspace_jail` | `files.*`; with `commands`, also `commands.run` | paths: `root`, writable unless `readonly`; commands: `commands`, cwd `root`, `timeout` | `root`, `readonly`, `commands`, `timeout`, `deny`, `max_bytes` |
| `ci_runner` | `files.list`, `files.stat`, `files.read`, `files.download` (`files.*` with `writable`), `commands.run` | paths: `root`, read-only unless `writable`; commands: `commands` (required), cwd `root`; timeout `600s` unless `timeout` | `root`, `commands`, `writable`, `timeout`, `deny`, `max_bytes` |
| `full_access` | `*` (every op) | paths: `root` with no deny pattern; commands: `commands`, else `sh ...`, cwd `root`; refused without `unsafe: true`, always a lint error | `root`, `unsafe`, `commands` |
| `agent_host` | `agents.<a>.run`, `agents.<a>.sessions.create`, `agents.<a>.sessions.send_event` for each adapter, `agents.sessions.create`, `llm.chat` | agents: workdir `root`, `permissions` (`read-only` by default; `full` refused); adapters: `agents`, else the top-level `agents`, else `codex` | `root`, `agents`, `permissions` |

Every preset also takes `confirm: never` (mapping form): the confirm-tier calls its rules \
allow run without a person's approval (destructive ops stay confirmed). Writes are confirm-tier \
ops, so without it (and with `guardrails.mode: enforce`, the default) a preset that allows \
writing waits for a person on each write.

**Auth and open mode.** A preset's rules have no `principals`: they apply to every caller, \
and, without `auth`, to the anonymous caller of open mode. `corral serve` without auth \
refuses to listen off loopback, and refuses, even on loopback, a config whose anonymous \
caller could run programs (`commands.run`, custom ops, upstream tools, the agent ops), unless \
started with `--allow-open`. So, on their own, `minimal`, `files_readonly`, `readonly` and \
`download_only` run open on loopback (`readonly` also mounts any custom op declared `read`, \
which runs a program); `commands_only`, `workspace_jail` with `commands`, `ci_runner`, \
`full_access` and `agent_host` need `auth.tokens` (or `auth.jwt`), or `--allow-open`.
";

/// The title of a table's section.
fn title(t: &Table) -> String {
    match t.paths.first() {
        Some(p) if !p.is_empty() => format!("`{p}`"),
        _ => "Top level".to_owned(),
    }
}

/// A table cell: no `|` breaks the row, no newline either.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn section(t: &Table, out: &mut String) {
    out.push_str(&format!("## {}\n\n", title(t)));
    let also: Vec<String> = t.paths.iter().skip(1).map(|p| format!("`{p}`")).collect();
    if !also.is_empty() {
        out.push_str(&format!("Also at {}.\n\n", also.join(", ")));
    }
    out.push_str(t.about);
    out.push_str(&format!(" (Decoder table: `{}`.)", t.name.replace(' ', "")));
    out.push_str("\n\n| key | type | default | example | start-up only | meaning |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for KeyRow { key, doc } in t.keys() {
        out.push_str(&format!(
            "| `{key}` | {} | {} | `{}` | {} | {} |\n",
            cell(doc.ty),
            cell(doc.default),
            cell(doc.example),
            if doc.startup_only { "yes" } else { "no" },
            cell(doc.about),
        ));
    }
    out.push('\n');
}

/// `docs/CONFIG.md`: every table of the decoder with its keys, then the shared syntax (deny
/// globs, role selectors, rates) and the presets.
pub fn reference_markdown() -> String {
    let mut out = String::from("# Config reference\n\n");
    out.push_str(INTRO);
    out.push('\n');
    for t in REGISTRY {
        section(t, &mut out);
    }
    for s in [GLOBS, ROLES, RATES, PRESETS] {
        out.push_str(s);
        out.push('\n');
    }
    // One newline at the end of the file.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{REGENERATE, reference_markdown};
    use crate::decode::REGISTRY;

    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn config_md_matches_the_decoder() {
        let path = root().join("docs/CONFIG.md");
        let want = reference_markdown();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let _ = std::fs::write(&path, &want);
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/CONFIG.md is out of date; run `{REGENERATE}`"
        );
    }

    #[test]
    fn every_key_of_every_table_is_documented() {
        for t in REGISTRY {
            assert!(
                !t.about.trim().is_empty(),
                "table `{}` has no about",
                t.name
            );
            assert!(!t.paths.is_empty(), "table `{}` has no path", t.name);
            for row in t.keys() {
                let d = row.doc;
                for (what, v) in [
                    ("type", d.ty),
                    ("default", d.default),
                    ("example", d.example),
                    ("meaning", d.about),
                ] {
                    assert!(
                        !v.trim().is_empty(),
                        "`{}` of table `{}` has no {what}",
                        row.key,
                        t.name
                    );
                }
                // The example is shown as inline code: a backtick would end it.
                assert!(
                    !d.example.contains('`'),
                    "the example of `{}` in `{}` holds a backtick",
                    row.key,
                    t.name
                );
            }
        }
    }

    /// The names of the decoder's tables: every `pub(super) const X: &[Field<` of
    /// `decode.rs` and `decode/*.rs`.
    fn decoder_tables() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![dir.join("decode.rs")];
        let mut subs: Vec<_> = std::fs::read_dir(dir.join("decode"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        subs.sort();
        files.extend(subs);
        let mut names = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for line in text.lines() {
                if let Some(rest) = line.trim_start().strip_prefix("pub(super) const ")
                    && let Some((name, ty)) = rest.split_once(':')
                    && ty.trim_start().starts_with("&[Field<")
                {
                    names.push(name.trim().to_owned());
                }
            }
        }
        names
    }

    #[test]
    fn every_table_of_the_decoder_is_in_the_registry() {
        let tables = decoder_tables();
        assert!(tables.len() > 30, "found only {tables:?}");
        let registered: Vec<String> = REGISTRY
            .iter()
            .map(|t| {
                t.name
                    .rsplit("::")
                    .next()
                    .unwrap_or(t.name)
                    .trim()
                    .to_owned()
            })
            .collect();
        for t in &tables {
            assert!(
                registered.contains(t),
                "the decoder's table `{t}` is not in `decode::REGISTRY`, so docs/CONFIG.md misses it"
            );
        }
        for r in &registered {
            assert!(
                registered.iter().filter(|x| *x == r).count() == 1,
                "`{r}` is in the registry twice"
            );
        }
    }

    #[test]
    fn every_preset_is_in_the_preset_table() {
        let md = reference_markdown();
        for p in corral_policy::presets::PRESET_NAMES {
            assert!(
                md.contains(&format!("| `{p}` |")),
                "preset `{p}` is missing"
            );
        }
    }
}
