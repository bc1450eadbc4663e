//! Conditions: boolean expressions over typed values.
//!
//! `{{path}}` is the typed value; a string literal holding templates (`'{{path}}'`, the
//! reference system's quoted form) is the text form of the values. Either way a value is
//! bound, never pasted into the source, so quotes inside values are harmless.

use crate::ast::Compiled;
use crate::error::clip;
use crate::lex::Mode;
use crate::limits::MAX_TEXT_LEN;
use crate::value::describe;
use crate::{ExprError, Path, Scope};
use serde_json::Value;

/// A compiled condition.
#[derive(Debug, Clone)]
pub struct Condition {
    source: String,
    compiled: Compiled,
}

impl Condition {
    /// Compiles a condition such as `{{a.output.status}} == 'ok' && {{a.output.n}} > 3`.
    pub fn compile(text: &str) -> Result<Condition, ExprError> {
        if text.len() > MAX_TEXT_LEN {
            return Err(ExprError::Limit {
                what: "condition length in bytes",
                limit: MAX_TEXT_LEN,
            });
        }
        Ok(Condition {
            compiled: Compiled::compile(text, Mode::Condition)?,
            source: text.to_string(),
        })
    }

    /// Evaluates the condition against `scope`; a non-boolean result is an error.
    pub fn evaluate(&self, scope: &dyn Scope) -> Result<bool, ExprError> {
        let fail = |reason: String| ExprError::Eval {
            text: clip(&self.source),
            reason,
        };
        match &*self.compiled.eval(scope).map_err(fail)? {
            Value::Bool(b) => Ok(*b),
            other => Err(fail(format!(
                "the result is {}, not true or false",
                describe(other)
            ))),
        }
    }

    /// Every path the condition names.
    pub fn paths(&self) -> Vec<&Path> {
        self.compiled.paths().collect()
    }

    /// Every `path == literal`, `path != literal` and `path in [literals]`, as `(path,
    /// literal)`: for a validator that knows which values a path can hold.
    pub fn literal_comparisons(&self) -> Vec<(&Path, &Value)> {
        self.compiled.literal_comparisons()
    }

    /// What is wrong whatever the values: a function applied to literals that it fails on
    /// (`length(5)`, `fromJSON('x')`). One message each; empty when nothing is.
    pub fn problems(&self) -> Vec<String> {
        self.compiled.problems()
    }

    /// The text the condition was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{MAX_EXPR_DEPTH, MAX_NESTING};
    use serde_json::{json, Map};

    fn scope() -> Map<String, Value> {
        let Value::Object(m) = json!({
            "workflow": {"input": {"kind": "B", "n": 7, "f": 7.0, "s7": "7", "word": "abc"}},
            "a": {"output": {"status": "ok", "n": 5, "score": "7", "items": [1, 2, 3],
                             "empty": [], "tags": ["x", "y"], "obj": {"k": 1, "j": 2},
                             "quote": "it's", "dquote": "say \"hi\"", "both": "a'b\"c",
                             "flag": true, "nothing": null, "json": "{\"a\": [1, 2]}",
                             "big": 10.5}},
            "_map_item": {"name": "first"},
            "_loop_iteration": 2,
        }) else {
            unreachable!()
        };
        m
    }

    fn eval(text: &str) -> Result<bool, ExprError> {
        Condition::compile(text)?.evaluate(&scope())
    }

    fn yes(text: &str) {
        assert_eq!(eval(text), Ok(true), "{text}");
    }

    fn no(text: &str) {
        assert_eq!(eval(text), Ok(false), "{text}");
    }

    #[test]
    fn bare_and_quoted_forms() {
        yes("{{a.output.status}} == 'ok'");
        yes("'{{a.output.status}}' == 'ok'");
        yes("\"{{a.output.status}}\" == \"ok\"");
        no("{{a.output.status}} == 'OK'");
        yes("{{a.output.status}} != 'failed'");
        yes("'{{a.output.n}}' == '5'");
        yes("'status={{a.output.status}}' == 'status=ok'");
    }

    #[test]
    fn values_with_quotes() {
        yes("{{a.output.quote}} == \"it's\"");
        yes("'{{a.output.quote}}' == \"it's\"");
        yes("\"{{a.output.quote}}\" == 'it\\'s'");
        yes("{{a.output.dquote}} == 'say \"hi\"'");
        yes("'{{a.output.dquote}}' == 'say \"hi\"'");
        yes("{{a.output.both}} == '{{a.output.both}}'");
        yes("\"{{a.output.both}}\" == 'a\\'b\"c'");
        yes("contains({{a.output.quote}}, \"'\")");
    }

    #[test]
    fn comparisons_and_numbers() {
        yes("{{a.output.n}} > 3");
        yes("{{a.output.n}} >= 5 && {{a.output.n}} <= 5");
        no("{{a.output.n}} < 5");
        yes("{{workflow.input.n}} == {{workflow.input.f}}");
        yes("{{workflow.input.n}} == 7.0");
        yes("{{a.output.big}} > 10");
        yes("-{{a.output.n}} < 0");
        yes("-(1) == -1");
        yes("{{a.output.n}} * 2 == 10");
        yes("'b' > 'a'");
        // The numeric-string rule: ordering treats "7" as 7, equality stays typed.
        yes("{{a.output.score}} > 3");
        yes("'{{a.output.n}}' > 3");
        yes("{{a.output.score}} <= 7");
        no("{{a.output.score}} == 7");
        yes("{{a.output.score}} == '7'");
        yes("{{workflow.input.s7}} != {{workflow.input.n}}");
        assert!(eval("{{workflow.input.word}} > 3").is_err());
    }

    #[test]
    fn null_rules() {
        yes("{{a.output.nothing}} == null");
        yes("{{a.output.missing}} == None");
        yes("{{nosuch.output.x}} == NULL");
        no("{{a.output.missing}} == 0");
        no("{{a.output.missing}} == ''");
        no("{{a.output.missing}} == false");
        yes("{{a.output.missing}} != 'x'");
        yes("'{{a.output.missing}}' == ''");
        let err = eval("{{a.output.missing}} > 3").unwrap_err();
        assert!(err.to_string().contains("cannot order null"), "{err}");
    }

    #[test]
    fn logic_and_keywords() {
        yes("{{a.output.flag}}");
        yes("{{a.output.flag}} and {{a.output.n}} > 1");
        yes("{{a.output.n}} > 100 or {{a.output.flag}}");
        yes("not {{a.output.n}} > 100");
        yes("not ({{a.output.n}} > 100)");
        yes("!({{a.output.n}} > 100)");
        yes("TRUE && True");
        no("true AND False");
        yes("not not true");
        // Found by fuzzing: `not -1` read as `__not - 1`, "unknown name '__not'".
        yes("not -1 > 0");
        yes("not - {{a.output.n}} > 0");
        let err = eval("-5 not in -{{a.output.n}}").unwrap_err().to_string();
        assert!(
            err.contains("cannot look for a number (-5) in a number (-5)"),
            "{err}"
        );
        assert!(eval("not -1")
            .unwrap_err()
            .to_string()
            .contains("'not' needs true or false"));
        yes("{{a.output.n}} == 5 && ({{a.output.status}} == 'x' || {{a.output.flag}})");
        // Short-circuit: the right side would be an error.
        yes("true || {{a.output.missing}} > 1");
        no("false && {{a.output.missing}} > 1");
        assert!(eval("{{a.output.n}} && true").is_err());
        assert!(eval("not {{a.output.n}}").is_err());
    }

    #[test]
    fn membership() {
        yes("{{workflow.input.kind}} in ['A', 'B']");
        no("{{workflow.input.kind}} in ['A', 'C']");
        yes("{{workflow.input.kind}} not in ['A', 'C']");
        yes("{{workflow.input.kind}} NOT IN ['A']");
        yes("not {{workflow.input.kind}} in ['A']");
        no("{{workflow.input.kind}} in []");
        yes("{{workflow.input.n}} in [1, 7.0]");
        yes("'{{workflow.input.n}}' in ['7']");
        yes("{{workflow.input.kind}} in ('A', 'B')");
        yes("'x' in {{a.output.tags}}");
        yes("'b' in {{workflow.input.word}}");
        yes("'k' in {{a.output.obj}}");
        no("'x' in {{a.output.missing}}");
        yes("[1, 2] in [[1, 2], [3]]");
        yes("{{a.output.n}} > 1 and {{workflow.input.kind}} in ['B'] or false");
        assert!(eval("1 in 2").is_err());
    }

    #[test]
    fn functions() {
        yes("length({{a.output.items}}) > 0");
        yes("length({{a.output.empty}}) == 0");
        yes("length({{a.output.obj}}) == 2");
        yes("length({{workflow.input.word}}) == 3");
        yes("length('héllo') == 5");
        yes("length({{a.output.missing}}) == 0");
        yes("contains({{a.output.tags}}, 'x')");
        no("contains({{a.output.tags}}, 'z')");
        yes("contains({{workflow.input.word}}, 'bc')");
        yes("contains({{a.output.items}}, 2.0)");
        yes("toJSON({{a.output.obj}}) == '{\"k\":1,\"j\":2}'");
        yes("tojson({{a.output.quote}}) == '\"it\\'s\"'");
        yes("length(fromJSON({{a.output.json}})) == 1");
        yes("fromJSON('[1, 2]') == [1, 2]");
        assert!(eval("fromJSON('nope') == 1").is_err());
        assert!(eval("length(1) == 1").is_err());
        assert!(Condition::compile("length(1, 2) == 1").is_err());
        assert!(Condition::compile("contains('a') == 1").is_err());
    }

    #[test]
    fn ternaries() {
        yes("({{a.output.n}} > 3 ? 'big' : 'small') == 'big'");
        yes("{{a.output.flag}} ? true : false");
        no("{{a.output.n}} > 100 ? true : false");
        // Right-associative, and loosest of all: the condition is the whole operand.
        yes("{{a.output.n}} > 100 ? false : {{a.output.n}} > 4 ? true : false");
        yes("false or {{a.output.flag}} ? {{a.output.n}} == 5 : false");
        yes("true ? false ? false : true : false");
        yes("length([1, true ? 2 : 3, 4]) == 3");
        yes("contains(true ? {{a.output.tags}} : [], 'x')");
        yes("(1 > 2 ? 'a' : 'b') in ['b']");
        // The branch not taken is not evaluated.
        yes("true ? true : {{a.output.missing}} > 1");
        let err = eval("{{a.output.n}} ? true : false")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'?' needs true or false, got a number (5)"),
            "{err}"
        );
        for (bad, needle) in [
            ("true ? 1", "no ':'"),
            ("true : 1", "no '?' before it"),
            ("? 1 : 2", "needs a condition"),
            ("true ? : 2", "needs a value"),
            ("true ? 1 :", "else part"),
            ("true ? 1 : 2 : 3", "no '?' before it"),
            ("(true ? 1) : 2", "no ':'"),
            ("[true ? 1, 2 : 3]", "no ':'"),
        ] {
            let err = Condition::compile(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn coalesce_and_concat_as_functions() {
        yes("coalesce({{a.output.missing}}, {{a.output.nothing}}, 'x') == 'x'");
        yes("coalesce({{a.output.missing}}) == null");
        yes("coalesce() == null");
        // Lazy: a later argument that would fail is not evaluated.
        yes("coalesce(1, fromJSON('nope')) == 1");
        yes("concat({{a.output.items}}, [4]) == [1, 2, 3, 4]");
        yes("concat('s=', {{a.output.status}}, {{a.output.missing}}) == 's=ok'");
        yes("concat() == ''");
        let err = Condition::compile("nope({{a.output.n}}) == 1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown function 'nope'"), "{err}");
        assert!(err.contains("coalesce, concat"), "{err}");
    }

    #[test]
    fn what_is_known_without_values() {
        let c = Condition::compile(
            "'{{a.status}}' == 'success' or 'failure' != {{b.status}} or {{c.status}} in ['x', 1] or {{d.output}} == {{e.output}}",
        )
        .unwrap();
        let pairs: Vec<String> = c
            .literal_comparisons()
            .iter()
            .map(|(p, v)| format!("{p}={v}"))
            .collect();
        assert_eq!(
            pairs,
            [
                "a.status=\"success\"",
                "b.status=\"failure\"",
                "c.status=\"x\"",
                "c.status=1"
            ]
        );
        let c = Condition::compile("length(3) == 1 and contains(1, 'a') and length({{a.x}}) > 0")
            .unwrap();
        assert_eq!(c.problems().len(), 2, "{:?}", c.problems());
        assert!(
            c.problems()[1].contains("cannot look for"),
            "{:?}",
            c.problems()
        );
    }

    #[test]
    fn scope_roots() {
        yes("{{item.name}} == 'first'");
        yes("{{_map_item.name}} == 'first'");
        yes("{{_loop_iteration}} < 3");
        yes("{{workflow.parameters.kind}} == 'B'");
        let c = Condition::compile("{{a.output.n}} > 1 and '{{item.x}}' == {{workflow.input.y}}")
            .unwrap();
        let paths: Vec<String> = c.paths().iter().map(|p| p.to_string()).collect();
        assert_eq!(paths, ["a.output.n", "_map_item.x", "workflow.input.y"]);
        assert_eq!(
            c.source(),
            "{{a.output.n}} > 1 and '{{item.x}}' == {{workflow.input.y}}"
        );
    }

    #[test]
    fn non_boolean_result_names_the_condition() {
        let err = eval("{{a.output.n}} + 1").unwrap_err();
        assert!(matches!(err, ExprError::Eval { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("{{a.output.n}} + 1") && msg.contains("not true or false"),
            "{msg}"
        );
        assert!(eval("{{a.output.status}}").is_err());
        assert!(eval("{{a.output.missing}}").is_err());
    }

    #[test]
    fn parse_errors() {
        for (bad, needle) in [
            ("{{a.output.status}} == ok", "unknown name 'ok'"),
            ("a.output.status == 'ok'", "write paths as"),
            ("{{a.output.n}} = 1", "use '=='"),
            ("{{a.output.n}} > ", "missing an operand"),
            ("{{a.output.n}} > > 1", "missing"),
            ("({{a.output.n}} > 1", "never closed"),
            ("{{a.output.n}} > 1)", "no matching"),
            ("[1, 2)", "does not close"),
            ("'abc", "never closed"),
            ("'abc\\", "never closed"),
            ("{{a.output", "never closed"),
            ("{{a..b}} == 1", "not a path"),
            ("{{a.n + 1}} == 1", "not a path"),
            ("{{a.n}} {{a.m}}", "missing"),
            ("", "empty"),
            ("   ", "empty"),
            ("()", "empty"),
            ("1, 2", "','"),
            ("(1, 2)", "','"),
            ("in [1]", "left"),
            ("length", "is a function"),
            ("1 & 2", "'&&'"),
            ("1 % 2 == 1", "unexpected character"),
            ("1x == 1", "after the number"),
            ("'\\q' == 1", "unknown escape"),
            ("__v0", "unknown name"),
        ] {
            let err = Condition::compile(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    ExprError::Parse {
                        what: "condition",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn limits() {
        let huge = format!("'{}' == ''", "x".repeat(64 * 1024));
        assert!(matches!(
            Condition::compile(&huge),
            Err(ExprError::Limit { .. })
        ));
        let nested = format!(
            "{}true{}",
            "(".repeat(MAX_NESTING + 1),
            ")".repeat(MAX_NESTING + 1)
        );
        assert!(matches!(
            Condition::compile(&nested),
            Err(ExprError::Limit { .. })
        ));
        let nested = format!("{}true{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert_eq!(
            Condition::compile(&nested).unwrap().evaluate(&scope()),
            Ok(true)
        );
        let chain = vec!["false"; MAX_EXPR_DEPTH + 10].join(" or ");
        assert!(matches!(
            Condition::compile(&chain),
            Err(ExprError::Limit { .. })
        ));
        let chain = vec!["false"; 60].join(" or ") + " or true";
        assert_eq!(
            Condition::compile(&chain).unwrap().evaluate(&scope()),
            Ok(true)
        );
        let many = vec!["1"; 2000].join(" + ");
        assert!(matches!(
            Condition::compile(&many),
            Err(ExprError::Limit { .. })
        ));
        for long_chain in [
            "!".repeat(1000) + "true",
            "- ".repeat(1000) + "1",
            "not ".repeat(1000) + "true",
            "not ".repeat(500) + "1 == 1",
            "1 - ".repeat(500) + "1",
        ] {
            assert!(matches!(
                Condition::compile(&long_chain),
                Err(ExprError::Limit { .. })
            ));
        }
        assert_eq!(eval(&("not ".repeat(100) + "1 == 1")), Ok(true));
        let nots = "!".repeat(5000) + "true";
        assert!(matches!(
            Condition::compile(&nots),
            Err(ExprError::Limit { .. })
        ));
    }
}
