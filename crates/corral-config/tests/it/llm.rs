//! `llm:` (the LLM proxy's upstream, by variable names only) and `budgets.tokens`.

use std::collections::HashMap;
use std::path::Path;

use corral_config::{Severity, load_str};

use crate::{BASE, env, load, the};

const KEY: &str = "sk-test-provider-key-0123456789";

fn llm_env() -> HashMap<String, String> {
    let mut e = env();
    e.insert("LLM_URL".to_owned(), "http://127.0.0.1:9/v1/".to_owned());
    e.insert("LLM_KEY".to_owned(), KEY.to_owned());
    e.insert("LLM_BAD_URL".to_owned(), "ftp://example.com".to_owned());
    e
}

fn load_llm(yaml: &str) -> Result<corral_config::Loaded, corral_config::LoadError> {
    load_str("corral.yaml", yaml, Path::new(BASE), &llm_env())
}

#[test]
fn an_llm_section_resolves_the_url_and_key_from_the_variables_it_names() {
    let l = load_llm(
        "version: 1\nllm: {base_url_env: LLM_URL, api_key_env: LLM_KEY, root_agent: lead}\n",
    )
    .unwrap();
    let r = l.llm.as_ref().unwrap();
    assert_eq!(r.base_url, "http://127.0.0.1:9/v1");
    assert_eq!(r.api_key.as_ref().unwrap().expose(), KEY);
    assert_eq!(r.root_agent, "lead");
    // The key is never printed, and no child process gets either variable.
    assert!(!format!("{r:?}").contains(KEY));
    assert!(l.secret_envs().contains(&"LLM_KEY".to_owned()));
    assert!(l.secret_envs().contains(&"LLM_URL".to_owned()));
}

#[test]
fn the_root_agent_is_root_when_the_config_does_not_name_one() {
    let l = load_llm("version: 1\nllm: {base_url_env: LLM_URL}\n").unwrap();
    let r = l.llm.as_ref().unwrap();
    assert_eq!(r.root_agent, "root");
    assert!(r.api_key.is_none());
}

#[test]
fn no_llm_section_means_no_upstream() {
    assert!(load("version: 1\n").llm.is_none());
}

#[test]
fn an_inline_api_key_is_refused_with_a_fix_and_never_echoed() {
    let e = load_llm(&format!(
        "version: 1\nllm: {{base_url_env: LLM_URL, api_key: {KEY}}}\n"
    ))
    .unwrap_err();
    let d = the(&e.diagnostics, "config.inline_secret", Severity::Error);
    assert_eq!(d.location, "llm.api_key");
    assert!(d.fix.contains("api_key_env"));
    assert!(!d.message.contains(KEY));
}

#[test]
fn an_inline_url_is_refused_with_a_fix() {
    let e = load_llm("version: 1\nllm: {base_url: 'https://api.openai.com/v1'}\n").unwrap_err();
    let d = the(&e.diagnostics, "config.invalid_value", Severity::Error);
    assert_eq!(d.location, "llm.base_url");
    assert!(d.fix.contains("base_url_env"));
    the(&e.diagnostics, "config.missing_key", Severity::Error);
}

#[test]
fn a_value_written_where_a_variable_name_goes_is_refused_without_repeating_it() {
    let e = load_llm(&format!(
        "version: 1\nllm: {{base_url_env: LLM_URL, api_key_env: {KEY}}}\n"
    ))
    .unwrap_err();
    let d = the(&e.diagnostics, "config.inline_secret", Severity::Error);
    assert_eq!(d.location, "llm.api_key_env");
    assert!(!d.message.contains(KEY));
    assert!(!d.fix.contains(KEY));
}

#[test]
fn an_unset_variable_is_named_with_the_export_that_fixes_it() {
    let e = load_llm("version: 1\nllm: {base_url_env: NOT_SET_ANYWHERE}\n").unwrap_err();
    let d = the(&e.diagnostics, "config.token_env_unset", Severity::Error);
    assert_eq!(d.location, "llm.base_url_env");
    assert!(d.fix.starts_with("export NOT_SET_ANYWHERE="));
}

#[test]
fn a_url_that_is_not_http_is_refused_without_printing_it() {
    let e = load_llm("version: 1\nllm: {base_url_env: LLM_BAD_URL}\n").unwrap_err();
    let d = the(&e.diagnostics, "config.invalid_value", Severity::Error);
    assert!(!d.message.contains("ftp://"));
}

#[test]
fn an_unknown_llm_key_gets_a_did_you_mean() {
    let e = load_llm("version: 1\nllm: {base_url_env: LLM_URL, root_agnet: x}\n").unwrap_err();
    let d = the(&e.diagnostics, "config.unknown_key", Severity::Error);
    assert!(
        d.message.contains("root_agent") || d.fix.contains("root_agent"),
        "{d:?}"
    );
}

#[test]
fn budgets_tokens_is_read_as_a_count() {
    let l = load("version: 1\nbudgets: {tokens: 5000}\n");
    assert_eq!(l.config.budgets.tokens, 5000);
}

#[test]
fn the_api_is_openai_unless_the_section_says_anthropic_and_any_other_is_refused_with_the_choices() {
    use corral_config::model::LlmApi;
    let l = load_llm("version: 1\nllm: {base_url_env: LLM_URL}\n").unwrap();
    assert_eq!(l.llm.as_ref().unwrap().api, LlmApi::OpenAi);
    let l = load_llm("version: 1\nllm: {base_url_env: LLM_URL, api: anthropic}\n").unwrap();
    assert_eq!(l.llm.as_ref().unwrap().api, LlmApi::Anthropic);
    let e = load_llm("version: 1\nllm: {base_url_env: LLM_URL, api: gemini}\n").unwrap_err();
    let d = the(&e.diagnostics, "config.invalid_value", Severity::Error);
    assert_eq!(d.location, "llm.api");
    assert!(d.message.contains("gemini"), "{}", d.message);
    assert!(d.fix.contains("api: anthropic"), "{}", d.fix);
}
