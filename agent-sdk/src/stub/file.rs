//! Reading a stub file: YAML (or JSON) into a [`StubFile`], checking everything at load and
//! reporting every problem with its place (`FILE: agents[2].rules[0].when: ...`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use workflow_expr::{duration, Condition, Template, TemplateOptions};

use super::{Answer, Rule, StubAgent, StubFile};
use crate::schema::Schema;
use workflow_expr::file_type_name as kind;

/// The names a stub's templates and conditions may use.
const ROOTS: &[&str] = &["input", "call"];

/// Collects problems, each already prefixed with the origin.
pub(crate) struct Problems {
    origin: String,
    list: Vec<String>,
}

impl Problems {
    pub(crate) fn add(&mut self, at: &str, message: impl std::fmt::Display) {
        self.list.push(format!("{}: {at}: {message}", self.origin));
    }

    /// How many problems so far.
    pub(crate) fn count(&self) -> usize {
        self.list.len()
    }
}

/// The fields of one mapping; reports keys nobody asked for.
pub(crate) struct Fields<'a> {
    at: String,
    map: &'a Map<String, Value>,
    known: &'static [&'static str],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(
        p: &mut Problems,
        at: String,
        v: &'a Value,
        known: &'static [&'static str],
    ) -> Option<Self> {
        let Value::Object(map) = v else {
            p.add(&at, format!("expected a mapping, found {}", kind(v)));
            return None;
        };
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                p.add(
                    &at,
                    format!(
                        "unknown field `{key}` (expected one of: {})",
                        known.join(", ")
                    ),
                );
            }
        }
        Some(Fields { at, map, known })
    }

    pub(crate) fn at(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        debug_assert!(self.known.contains(&key));
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The entry's `name`: one subject token, required (the empty string, with a problem
    /// added, when it is missing or not one).
    pub(crate) fn name(&self, p: &mut Problems) -> String {
        match self.string(p, "name") {
            Some(n) => {
                if let Err(e) = messages::subjects::validate_token(&n) {
                    p.add(&self.at("name"), e);
                }
                n
            }
            None => {
                if self.get("name").is_none() {
                    p.add(&self.at("name"), "missing: every agent needs a name");
                }
                String::new()
            }
        }
    }

    pub(crate) fn string(&self, p: &mut Problems, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => {
                p.add(
                    &self.at(key),
                    format!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }
}

/// Parses and checks stub text (YAML or JSON); `origin` prefixes every problem.
pub(super) fn parse(text: &str, origin: &str) -> Result<StubFile, Vec<String>> {
    match serde_yaml::from_str::<Value>(text) {
        Ok(v) => from_value(&v, origin),
        Err(e) => Err(vec![format!("{origin}: {e}")]),
    }
}

/// Checks an already parsed document: `{agents: [...]}` or the bare list.
pub(super) fn from_value(doc: &Value, origin: &str) -> Result<StubFile, Vec<String>> {
    let mut p = Problems {
        origin: origin.to_owned(),
        list: Vec::new(),
    };
    let list = match doc {
        Value::Array(_) => Some(doc),
        Value::Object(_) => Fields::new(&mut p, String::new(), doc, &["agents"]).and_then(|f| {
            match f.get("agents") {
                Some(v) => Some(v),
                None => {
                    p.add("agents", "missing: list the stub agents under `agents:`");
                    None
                }
            }
        }),
        other => {
            p.add(
                "(top)",
                format!("expected a mapping with `agents`, found {}", kind(other)),
            );
            None
        }
    };
    let mut agents = Vec::new();
    let mut llm = Vec::new();
    let mut remote = Vec::new();
    match list {
        Some(Value::Array(items)) => {
            let mut names = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let at = format!("agents[{i}]");
                if let Some(name) = item.get("name").and_then(Value::as_str) {
                    if !names.insert(name.to_owned()) {
                        p.add(
                            &format!("{at}.name"),
                            format!("duplicate agent name {name:?}"),
                        );
                    }
                }
                if crate::remote::file::is_remote(item) {
                    remote.extend(crate::remote::file::agent(&mut p, at, item));
                } else if crate::llm::file::is_llm(item) {
                    llm.extend(crate::llm::file::agent(&mut p, at, item));
                } else {
                    agents.extend(agent(&mut p, at, item));
                }
            }
            if items.is_empty() {
                p.add("agents", "the list is empty");
            }
        }
        Some(other) => p.add("agents", format!("expected a list, found {}", kind(other))),
        None => {}
    }
    if p.list.is_empty() {
        Ok(StubFile {
            agents,
            llm,
            remote,
        })
    } else {
        Err(p.list)
    }
}

const AGENT_FIELDS: &[&str] = &[
    "name",
    "kind",
    "description",
    "input_schema",
    "output_schema",
    "delay",
    "fail_first",
    "error",
    "error_kind",
    "rules",
    "output",
];

fn agent(p: &mut Problems, at: String, v: &Value) -> Option<StubAgent> {
    let f = Fields::new(p, at, v, AGENT_FIELDS)?;
    let before = p.list.len();
    let name = f.name(p);
    if let Some(k) = f.string(p, "kind") {
        if k != "stub" {
            p.add(
                &f.at("kind"),
                format!("unknown kind {k:?} (expected stub or llm)"),
            );
        }
    }
    let description = f.string(p, "description");
    let input_schema = schema(p, &f, "input_schema");
    let output_schema = schema(p, &f, "output_schema");
    let delay = f
        .string(p, "delay")
        .and_then(|d| match duration::parse(&d) {
            Ok(d) => Some(d),
            Err(e) => {
                p.add(&f.at("delay"), e);
                None
            }
        });
    if let Some(v) = f.get("delay") {
        if !v.is_string() {
            // Already reported by `string`; say what would work.
            p.add(
                &f.at("delay"),
                "write a duration such as \"20ms\" or \"1s\"",
            );
        }
    }
    let fail_first = match f.get("fail_first") {
        None => 0,
        Some(v) => v.as_u64().unwrap_or_else(|| {
            p.add(
                &f.at("fail_first"),
                format!("expected a whole number ≥ 0, found {v}"),
            );
            0
        }),
    };
    let error = f.string(p, "error");
    let error_kind = f.string(p, "error_kind");
    let rules = match (f.get("rules"), f.get("output")) {
        (Some(_), Some(_)) => {
            p.add(
                &f.at("output"),
                "give either `rules` or `output` (short for one rule without `when`), not both",
            );
            Vec::new()
        }
        (None, None) => {
            p.add(
                &f.at("rules"),
                "missing: give `rules` or `output` (what the agent answers)",
            );
            Vec::new()
        }
        (None, Some(output)) => template(p, &f.at("output"), output)
            .map(|t| {
                vec![Rule {
                    when: None,
                    answer: Answer::Output(t),
                }]
            })
            .unwrap_or_default(),
        (Some(Value::Array(list)), None) => {
            if list.is_empty() {
                p.add(&f.at("rules"), "the list is empty");
            }
            list.iter()
                .enumerate()
                .filter_map(|(i, r)| rule(p, format!("{}[{i}]", f.at("rules")), r))
                .collect()
        }
        (Some(other), None) => {
            p.add(
                &f.at("rules"),
                format!("expected a list, found {}", kind(other)),
            );
            Vec::new()
        }
    };
    (p.list.len() == before).then_some(StubAgent {
        name,
        description,
        input_schema,
        output_schema,
        delay,
        fail_first,
        error,
        error_kind,
        rules,
    })
}

/// A field holding a JSON Schema, checked to compile.
pub(crate) fn schema(p: &mut Problems, f: &Fields<'_>, key: &str) -> Option<Value> {
    let v = f.get(key)?;
    match Schema::compile(v) {
        Ok(_) => Some(v.clone()),
        Err(e) => {
            p.add(&f.at(key), format!("not a valid JSON Schema: {e}"));
            None
        }
    }
}

const RULE_FIELDS: &[&str] = &["when", "output", "fail", "error_kind"];

fn rule(p: &mut Problems, at: String, v: &Value) -> Option<Rule> {
    let f = Fields::new(p, at, v, RULE_FIELDS)?;
    let before = p.list.len();
    let when = match f.get("when") {
        None => None,
        Some(Value::Bool(b)) => condition(p, &f.at("when"), if *b { "true" } else { "false" }),
        Some(Value::String(s)) => condition(p, &f.at("when"), s),
        Some(other) => {
            p.add(
                &f.at("when"),
                format!("expected a condition (a string), found {}", kind(other)),
            );
            None
        }
    };
    let kind_of_error = f.string(p, "error_kind");
    let answer = match (f.get("output"), f.get("fail")) {
        (Some(_), Some(_)) => {
            p.add(&f.at("fail"), "give either `output` or `fail`, not both");
            None
        }
        (None, None) => {
            p.add(
                &f.at("output"),
                "missing: a rule answers with `output` or `fail`",
            );
            None
        }
        (Some(output), None) => {
            if kind_of_error.is_some() {
                p.add(&f.at("error_kind"), "only a `fail` rule has an error kind");
            }
            template(p, &f.at("output"), output).map(Answer::Output)
        }
        (None, Some(Value::String(s))) => template(p, &f.at("fail"), &Value::String(s.clone()))
            .map(|message| Answer::Fail {
                message,
                kind: kind_of_error,
            }),
        (None, Some(other)) => {
            p.add(
                &f.at("fail"),
                format!(
                    "expected the error message (a string), found {}",
                    kind(other)
                ),
            );
            None
        }
    };
    match answer {
        Some(answer) if p.list.len() == before => Some(Rule { when, answer }),
        _ => None,
    }
}

fn condition(p: &mut Problems, at: &str, text: &str) -> Option<Condition> {
    match Condition::compile(text) {
        Ok(c) => check_roots(p, at, c.paths().into_iter().map(|p| p.root.as_str())).then_some(c),
        Err(e) => {
            p.add(at, e);
            None
        }
    }
}

fn template(p: &mut Problems, at: &str, v: &Value) -> Option<Template> {
    match Template::compile_with(v, TemplateOptions { arithmetic: true }) {
        Ok(t) => check_roots(p, at, t.paths().into_iter().map(|p| p.root.as_str())).then_some(t),
        Err(e) => {
            p.add(at, e);
            None
        }
    }
}

/// Reports names other than `input` and `call`; whether all were fine.
fn check_roots<'a>(p: &mut Problems, at: &str, roots: impl Iterator<Item = &'a str>) -> bool {
    let mut ok = true;
    for root in roots {
        if !ROOTS.contains(&root) {
            p.add(
                at,
                format!("unknown name `{root}`: a stub can use `input` (the node input) and `call` (the call count)"),
            );
            ok = false;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_loads() {
        let text = r#"
agents:
  - name: ValueClassifier
    description: Classifies a number
    input_schema: {type: object, properties: {value: {type: number}}}
    delay: 20ms
    fail_first: 2
    error: "upstream unavailable"
    error_kind: transient
    rules:
      - when: "{{input.value}} < 10"
        output: {category: small, value: "{{input.value}}"}
      - when: "{{input.mode}} == 'failure'"
        fail: "operation failed"
      - output: {category: large}
  - name: Echo
    output: "{{input}}"
"#;
        let file = parse(text, "stubs.yaml").unwrap();
        assert_eq!(file.agents.len(), 2);
        let a = &file.agents[0];
        assert_eq!(a.fail_first, 2);
        assert_eq!(a.delay, Some(std::time::Duration::from_millis(20)));
        assert_eq!(a.rules.len(), 3);
        assert!(matches!(a.rules[1].answer, Answer::Fail { .. }));
        assert_eq!(file.agents[1].rules.len(), 1);
    }

    #[test]
    fn every_problem_is_reported_with_its_place() {
        let text = r#"
agents:
  - name: "bad name"
    delay: soon
    fail_first: -1
    rules:
      - when: "{{input.x}} <"
        output: {}
      - output: "{{nothing.here}}"
      - {}
      - output: 1
        fail: "x"
  - name: Dup
    output: 1
  - name: Dup
    output: 1
    extra: true
  - description: no name and no rules
"#;
        let errors = parse(text, "s.yaml").unwrap_err();
        let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
        for needle in [
            "s.yaml: agents[0].name: ",
            "s.yaml: agents[0].delay: ",
            "s.yaml: agents[0].fail_first: ",
            "s.yaml: agents[0].rules[0].when: ",
            "s.yaml: agents[0].rules[1].output: unknown name `nothing`",
            "s.yaml: agents[0].rules[2].output: missing",
            "s.yaml: agents[0].rules[3].fail: give either",
            "s.yaml: agents[2]: unknown field `extra`",
            "s.yaml: agents[2].name: duplicate",
            "s.yaml: agents[3].name: missing",
            "s.yaml: agents[3].rules: missing",
        ] {
            assert!(has(needle), "{needle} not in {errors:#?}");
        }
    }

    #[test]
    fn syntax_errors_and_wrong_shapes_are_reported() {
        assert!(parse("agents: [", "f").unwrap_err()[0].starts_with("f: "));
        assert_eq!(
            parse("agents: 3", "f").unwrap_err(),
            vec!["f: agents: expected a list, found a number".to_owned()]
        );
        assert!(parse("- name: A\n  output: {}\n", "f").is_ok());
    }
}
