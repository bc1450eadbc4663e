//! Reading one JSON object of a workflow file by hand: every key in snake_case or camelCase
//! (plus the reference system's aliases), a key given twice under two spellings, unknown keys
//! with a did-you-mean, and typed accessors that report a wrong type instead of failing.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Map, Value};
use workflow_expr::{duration, Condition, Template};

use super::parse::is_token;
use super::problem::Sink;
use super::Schema;
pub(crate) use workflow_expr::file_type_name as type_name;

/// The camelCase spelling of a snake_case key (`retry_strategy` → `retryStrategy`).
pub(crate) fn camel(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The snake_case spelling of a camelCase key (`retryStrategy` → `retry_strategy`).
pub(crate) fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Edit distance between two short keys, counting a swap of neighbours as one edit
/// (optimal string alignment), so that `frist` is one edit from `first`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The known spelling closest to `key`, when it is close enough to be a typo.
pub(crate) fn did_you_mean<'k>(
    key: &str,
    known: impl IntoIterator<Item = &'k str>,
) -> Option<&'k str> {
    let lower = key.to_ascii_lowercase();
    let chars = lower.chars().count();
    known
        .into_iter()
        // The distance is at least the difference in length: a key much longer than every
        // known one (a fuzzer's megabyte) is never compared, which would cost its length
        // times theirs.
        .filter(|k| chars.abs_diff(k.chars().count()) <= (k.len() / 3).max(1))
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// One object being read. Each accessor marks its key (in every spelling) as known, so that
/// [`Fields::finish`] can report the keys nobody asked for.
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    node: Option<String>,
    prefix: String,
    known: Vec<String>,
    taken: HashSet<String>,
}

impl<'a> Fields<'a> {
    /// Reads `map`, reporting problems in `node` with field names prefixed by `prefix`
    /// (`"retry_strategy."`, `"branches[0]."`, or empty).
    pub(crate) fn new(map: &'a Map<String, Value>, node: Option<&str>, prefix: &str) -> Self {
        Fields {
            map,
            node: node.map(str::to_string),
            prefix: prefix.to_string(),
            known: Vec::new(),
            taken: HashSet::new(),
        }
    }

    /// The node the problems go to.
    pub(crate) fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// The full field name of `name` (with the prefix).
    pub(crate) fn field(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Records a problem at `name`.
    pub(crate) fn problem(&self, sink: &mut Sink, name: &str, message: impl Into<String>) {
        sink.push(self.node(), &self.field(name), message);
    }

    /// The value of `name` (snake_case), accepting its camelCase spelling and `aliases`
    /// (themselves in snake_case or camelCase). `null` counts as absent. Two spellings given
    /// at once is a problem; the first one wins.
    pub(crate) fn get(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<&'a Value> {
        let mut spellings: Vec<String> = Vec::new();
        for s in std::iter::once(name).chain(aliases.iter().copied()) {
            for sp in [s.to_string(), camel(s)] {
                if !spellings.contains(&sp) {
                    spellings.push(sp);
                }
            }
        }
        let present: Vec<&String> = spellings
            .iter()
            .filter(|s| self.map.contains_key(s.as_str()))
            .collect();
        if present.len() > 1 {
            let list: Vec<String> = present.iter().map(|s| format!("'{s}'")).collect();
            self.problem(
                sink,
                name,
                format!("{} are the same field; give only one", list.join(" and ")),
            );
        }
        let found = present.first().and_then(|s| self.map.get(s.as_str()));
        for s in &spellings {
            self.taken.insert(s.clone());
        }
        self.known.extend(spellings);
        found.filter(|v| !v.is_null())
    }

    /// Like [`Fields::get`], reporting `missing field` when absent.
    pub(crate) fn required(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<&'a Value> {
        let v = self.get(sink, name, aliases);
        if v.is_none() {
            self.problem(sink, name, "missing field");
        }
        v
    }

    /// Reports a wrong type at `name`.
    pub(crate) fn wrong(&self, sink: &mut Sink, name: &str, expected: &str, v: &Value) {
        self.problem(
            sink,
            name,
            format!("expected {expected}, found {}", type_name(v)),
        );
    }

    /// An optional string.
    pub(crate) fn string(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<String> {
        let v = self.get(sink, name, aliases)?;
        self.as_string(sink, name, v)
    }

    /// A required string.
    pub(crate) fn req_string(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<String> {
        let v = self.required(sink, name, aliases)?;
        self.as_string(sink, name, v)
    }

    fn as_string(&self, sink: &mut Sink, name: &str, v: &Value) -> Option<String> {
        match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                self.wrong(sink, name, "a string", v);
                None
            }
        }
    }

    /// An optional list of strings.
    pub(crate) fn strings(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<Vec<String>> {
        let v = self.get(sink, name, aliases)?;
        let Some(items) = v.as_array() else {
            self.wrong(sink, name, "a list of strings", v);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(s) => out.push(s.to_string()),
                None => self.wrong(sink, &format!("{name}[{i}]"), "a string", item),
            }
        }
        Some(out)
    }

    /// An optional boolean.
    pub(crate) fn bool(&mut self, sink: &mut Sink, name: &str) -> Option<bool> {
        let v = self.get(sink, name, &[])?;
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                self.wrong(sink, name, "true or false", v);
                None
            }
        }
    }

    /// An optional whole number of at least `min`.
    pub(crate) fn int(&mut self, sink: &mut Sink, name: &str, min: u64) -> Option<u64> {
        let v = self.get(sink, name, &[])?;
        match v.as_u64() {
            Some(n) if n >= min => Some(n),
            Some(n) => {
                self.problem(sink, name, format!("must be at least {min}, found {n}"));
                None
            }
            None if v.is_number() => {
                self.problem(
                    sink,
                    name,
                    format!("must be a whole number of at least {min}, found {v}"),
                );
                None
            }
            None => {
                self.wrong(sink, name, "a whole number", v);
                None
            }
        }
    }

    /// An optional whole number of at least `min` and at most `max`, the value of the limit
    /// named `limit` (see [`crate::limits`]).
    pub(crate) fn int_at_most(
        &mut self,
        sink: &mut Sink,
        name: &str,
        min: u64,
        (limit, max): (&str, u64),
    ) -> Option<u64> {
        let n = self.int(sink, name, min)?;
        if n > max {
            self.problem(sink, name, format!("{n} exceeds {limit} ({max})"));
            return None;
        }
        Some(n)
    }

    /// An optional duration: a duration string (`"5s"`, `"1m"`) or a number of seconds.
    /// With `positive`, zero is a problem.
    pub(crate) fn duration(
        &mut self,
        sink: &mut Sink,
        name: &str,
        positive: bool,
    ) -> Option<Duration> {
        let v = self.get(sink, name, &[])?;
        let parsed = match v {
            Value::Number(n) => match n.as_f64() {
                Some(secs) if (0.0..1e12).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
                _ => Err(format!("'{n}' is not a valid number of seconds")),
            },
            Value::String(s) => duration::parse(s).map_err(|e| e.to_string()),
            other => Err(format!(
                "expected a duration such as \"30s\" or a number of seconds, found {}",
                type_name(other)
            )),
        };
        match parsed {
            Ok(d) if positive && d.is_zero() => {
                self.problem(sink, name, "must be greater than zero");
                None
            }
            Ok(d) => Some(d),
            Err(message) => {
                self.problem(sink, name, message);
                None
            }
        }
    }

    /// An optional template (any JSON value).
    pub(crate) fn template(&mut self, sink: &mut Sink, name: &str) -> Option<Template> {
        let v = self.get(sink, name, &[])?;
        self.compile_template(sink, name, v)
    }

    /// Compiles `v` as the template at `name`.
    pub(crate) fn compile_template(
        &self,
        sink: &mut Sink,
        name: &str,
        v: &Value,
    ) -> Option<Template> {
        match Template::compile(v) {
            Ok(t) => Some(t),
            Err(e) => {
                self.problem(sink, name, e.to_string());
                None
            }
        }
    }

    /// An optional condition (a string).
    pub(crate) fn condition(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<Condition> {
        let text = self.string(sink, name, aliases)?;
        match Condition::compile(&text) {
            Ok(c) => Some(c),
            Err(e) => {
                self.problem(sink, name, e.to_string());
                None
            }
        }
    }

    /// A required condition (a string).
    pub(crate) fn req_condition(
        &mut self,
        sink: &mut Sink,
        name: &str,
        aliases: &[&str],
    ) -> Option<Condition> {
        let text = self.req_string(sink, name, aliases)?;
        match Condition::compile(&text) {
            Ok(c) => Some(c),
            Err(e) => {
                self.problem(sink, name, e.to_string());
                None
            }
        }
    }

    /// An optional JSON Schema, compiled.
    pub(crate) fn schema(&mut self, sink: &mut Sink, name: &str) -> Option<Schema> {
        let v = self.get(sink, name, &[])?;
        if !v.is_object() && !v.is_boolean() {
            self.wrong(sink, name, "a JSON Schema (a mapping)", v);
            return None;
        }
        match Schema::compile(v) {
            Ok(schema) => {
                for (at, why) in agent_sdk::schema::defaults::invalid(v) {
                    let message = format!("the default at {at} does not match its schema: {why}");
                    self.problem(sink, name, message);
                }
                Some(schema)
            }
            Err(e) => {
                let at = e.instance_path().to_string();
                let message = if at.is_empty() {
                    format!("not a valid JSON Schema: {e}")
                } else {
                    format!("not a valid JSON Schema: at {at}: {e}")
                };
                self.problem(sink, name, message);
                None
            }
        }
    }

    /// Reports every key that no accessor asked for. `elsewhere` lists the snake_case keys
    /// that are valid in sibling shapes (other node types), for a clearer message.
    pub(crate) fn finish(self, sink: &mut Sink, what: &str, elsewhere: &[&str]) {
        for key in self.map.keys() {
            if self.taken.contains(key) {
                continue;
            }
            let mut message = format!("unknown field '{key}'");
            if elsewhere.contains(&snake(key).as_str()) {
                message.push_str(&format!(" (not a field of {what})"));
            } else if let Some(k) = did_you_mean(key, self.known.iter().map(String::as_str)) {
                message.push_str(&format!(" (did you mean '{k}'?)"));
            }
            sink.push(self.node(), &self.field(key), message);
        }
    }
}

/// A list of named entries in the workflow block (`schedules`, `triggers`): absent is none;
/// not a list, or longer than `max`, is one problem; each item is read by `parse_one` with
/// its prefix (`{key}[{i}].`), and a name declared twice is a problem at its second place.
/// `what` is the singular word the messages use.
pub(super) fn named_list<T>(
    w: &mut Fields<'_>,
    sink: &mut Sink,
    (key, what, max): (&str, &str, usize),
    parse_one: impl Fn(&Value, &str, &mut Sink) -> Option<T>,
    name: impl Fn(&T) -> &str,
) -> Vec<T> {
    let Some(v) = w.get(sink, key, &[]) else {
        return Vec::new();
    };
    let Some(items) = v.as_array() else {
        w.wrong(sink, key, &format!("a list of {key}"), v);
        return Vec::new();
    };
    if items.len() > max {
        let n = items.len();
        w.problem(
            sink,
            key,
            format!("{n} {key} exceed the most a workflow declares ({max})"),
        );
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("{key}[{i}].");
        let Some(entry) = parse_one(item, &prefix, sink) else {
            continue;
        };
        let named = name(&entry).to_owned();
        if !seen.insert(named.clone()) {
            sink.push(
                None,
                &format!("{prefix}name"),
                format!("{what} '{named}' is declared twice"),
            );
            continue;
        }
        out.push(entry);
    }
    out
}

/// The longest name an entry of a named list may have.
const MAX_NAME: usize = 64;

/// Opens an item of a named list (see [`named_list`]) as a mapping and reads its `name`:
/// a token of at most 64 characters. An item that is not a mapping is one problem (it was
/// `expected` to hold, say, "'name' and 'subject' or 'stream'") and `None`; a name that is
/// missing or not a `what` name ("trigger") is reported, and comes back as `None` with the
/// fields, so that the item's other problems are reported too.
pub(super) fn named_item<'a>(
    item: &'a Value,
    prefix: &str,
    sink: &mut Sink,
    (what, expected): (&str, &str),
) -> Option<(Fields<'a>, Option<String>)> {
    let Some(obj) = item.as_object() else {
        let field = prefix.trim_end_matches('.');
        let found = type_name(item);
        sink.push(
            None,
            field,
            format!("expected a mapping with {expected}, found {found}"),
        );
        return None;
    };
    let mut f = Fields::new(obj, None, prefix);
    let name = f.req_string(sink, "name", &[]);
    let valid = |n: &String| is_token(n) && n.len() <= MAX_NAME;
    if let Some(n) = name.as_ref().filter(|n| !valid(n)) {
        f.problem(
            sink,
            "name",
            format!("'{n}' is not a {what} name: up to {MAX_NAME} letters, digits, '_' and '-'"),
        );
    }
    Some((f, name.filter(valid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        assert_eq!(camel("retry_strategy"), "retryStrategy");
        assert_eq!(camel("on_iterations_exhausted"), "onIterationsExhausted");
        assert_eq!(camel("id"), "id");
        assert_eq!(snake("maxDuration"), "max_duration");
        assert_eq!(snake("agent_name"), "agent_name");
    }

    #[test]
    fn typos_are_suggested() {
        let known = ["retryStrategy", "retry_strategy", "timeout", "input"];
        assert_eq!(did_you_mean("retryStratgy", known), Some("retryStrategy"));
        assert_eq!(did_you_mean("timout", known), Some("timeout"));
        assert_eq!(did_you_mean("banana", known), None);
        assert_eq!(did_you_mean("frist", ["first", "second"]), Some("first"));
    }
}
