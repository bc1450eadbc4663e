//! The lexer of conditions and template arithmetic. It turns the user's text into plain
//! evalexpr syntax in which every value (path, string, number, `true`, `null`, a quoted
//! template) is a generated identifier `__vN` bound to a [`Leaf`], so evalexpr only decides
//! structure (precedence, grouping, calls) and never sees user text. That is what makes
//! values containing quotes harmless in both the bare and the quoted form.

use crate::ast::Leaf;
use crate::error::{clip, ExprError};
use crate::limits::{MAX_EXPR_TOKENS, MAX_NESTING};
use crate::path::{is_ident_char, parse_reference};
use crate::template::split_text;
use serde_json::{Number, Value};
use std::fmt::Write;

/// What the text is: a condition (paths inside `{{ }}`) or the expression inside one
/// template hole (bare paths). Both have keywords, lists, functions and `a ? b : c`; a hole
/// has the binary arithmetic operators `+ - * /` only when `arithmetic` is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Condition,
    Hole { arithmetic: bool },
}

impl Mode {
    pub(crate) fn what(self) -> &'static str {
        match self {
            Mode::Condition => "condition",
            Mode::Hole { .. } => "template",
        }
    }
}

/// The functions expressions may call, by their canonical name.
pub(crate) const FUNCTIONS: [&str; 6] = [
    "length", "contains", "toJSON", "fromJSON", "coalesce", "concat",
];

/// A `? :` not yet closed: its `:` is still to come, or it is in its else part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ternary {
    AwaitingElse,
    InElse,
}

/// One level of brackets (the base level is the whole text): where its current operand
/// starts in the output, and the ternaries open at this level. `a ? b : c` is written
/// `__if((a),(b),(c))` for evalexpr, which has no ternary: the `__if((` goes in at the
/// operand's start when the `?` is seen, which is why the start is kept. A ternary binds
/// looser than every operator, so its condition is the whole operand up to the `?`.
#[derive(Debug, Default)]
struct Frame {
    start: usize,
    ternaries: Vec<Ternary>,
}

/// Lexer output: evalexpr source text and the values its identifiers stand for.
pub(crate) struct Lexed {
    pub(crate) src: String,
    pub(crate) leaves: Vec<Leaf>,
}

struct Lexer<'t> {
    text: &'t str,
    mode: Mode,
    pos: usize,
    out: String,
    leaves: Vec<Leaf>,
    brackets: Vec<char>,
    /// One per open bracket, and one for the whole text.
    frames: Vec<Frame>,
    /// Ternaries open at every level; each counts as two levels of nesting.
    open_ternaries: usize,
    tokens: usize,
    /// Whether the last token ends a value (so `+` is binary and `-` is a subtraction).
    after_value: bool,
}

/// Lexes `text` in `mode`.
pub(crate) fn lex(text: &str, mode: Mode) -> Result<Lexed, ExprError> {
    let mut lexer = Lexer {
        text,
        mode,
        pos: 0,
        out: String::with_capacity(text.len() + 16),
        leaves: Vec::new(),
        brackets: Vec::new(),
        frames: vec![Frame::default()],
        open_ternaries: 0,
        tokens: 0,
        after_value: false,
    };
    lexer.run()?;
    if let Some(open) = lexer.brackets.last() {
        return Err(lexer.fail(format!("'{open}' is never closed")));
    }
    lexer.end_operand()?;
    Ok(Lexed {
        src: lexer.out,
        leaves: lexer.leaves,
    })
}

impl Lexer<'_> {
    fn fail(&self, reason: String) -> ExprError {
        ExprError::Parse {
            what: self.mode.what(),
            text: clip(self.text),
            reason,
        }
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn emit(&mut self, token: &str, value: bool) -> Result<(), ExprError> {
        self.tokens += 1;
        if self.tokens > MAX_EXPR_TOKENS {
            return Err(ExprError::Limit {
                what: "number of tokens in an expression",
                limit: MAX_EXPR_TOKENS,
            });
        }
        self.out.push(' ');
        self.out.push_str(token);
        self.after_value = value;
        Ok(())
    }

    fn leaf(&mut self, leaf: Leaf) -> Result<(), ExprError> {
        let n = self.leaves.len();
        self.leaves.push(leaf);
        self.tokens += 1;
        if self.tokens > MAX_EXPR_TOKENS {
            return Err(ExprError::Limit {
                what: "number of tokens in an expression",
                limit: MAX_EXPR_TOKENS,
            });
        }
        // Infallible: writing to a String.
        let _ = write!(self.out, " __v{n}");
        self.after_value = true;
        Ok(())
    }

    fn open(&mut self, bracket: char) -> Result<(), ExprError> {
        if self.brackets.len() + 2 * self.open_ternaries >= MAX_NESTING {
            return Err(ExprError::Limit {
                what: "bracket nesting depth",
                limit: MAX_NESTING,
            });
        }
        self.brackets.push(bracket);
        Ok(())
    }

    fn close(&mut self, bracket: char) -> Result<(), ExprError> {
        let open = if bracket == ')' { '(' } else { '[' };
        match self.brackets.pop() {
            Some(b) if b == open => Ok(()),
            Some(b) => Err(self.fail(format!(
                "'{bracket}' at byte {} does not close '{b}'",
                self.pos - 1
            ))),
            None => Err(self.fail(format!(
                "'{bracket}' at byte {} has no matching '{open}'",
                self.pos - 1
            ))),
        }
    }

    fn run(&mut self) -> Result<(), ExprError> {
        while let Some(c) = self.rest().chars().next() {
            let start = self.pos;
            if c.is_whitespace() {
                self.pos += c.len_utf8();
            } else if self.rest().starts_with("{{") {
                self.template_path()?;
            } else if c == '\'' || c == '"' {
                self.string(c)?;
            } else if c.is_ascii_digit()
                || (c == '.' && self.rest()[1..].starts_with(|d: char| d.is_ascii_digit()))
            {
                self.number()?;
            } else if c.is_alphabetic() || c == '_' {
                match self.mode {
                    Mode::Condition => self.word()?,
                    Mode::Hole { .. } => self.hole_word()?,
                }
            } else {
                self.operator(c)?;
            }
            debug_assert!(self.pos > start, "the lexer always advances");
        }
        Ok(())
    }

    /// `{{path}}` in a condition.
    fn template_path(&mut self) -> Result<(), ExprError> {
        if self.mode != Mode::Condition {
            return Err(self.fail("'{{' cannot appear inside a template hole".into()));
        }
        let inner_start = self.pos + 2;
        let Some(len) = self.text[inner_start..].find("}}") else {
            return Err(self.fail(format!("'{{{{' at byte {} is never closed", self.pos)));
        };
        let inner = &self.text[inner_start..inner_start + len];
        let path = parse_reference(inner).map_err(|e| {
            self.fail(format!(
                "'{{{{{inner}}}}}' is not a path ({}); arithmetic and functions go outside the braces",
                crate::error::reason(&e)
            ))
        })?;
        self.pos = inner_start + len + 2;
        self.leaf(Leaf::Path(path))
    }

    /// A string literal in single or double quotes; `{{ }}` inside is interpolated.
    fn string(&mut self, quote: char) -> Result<(), ExprError> {
        let open_at = self.pos;
        let mut content = String::new();
        let mut i = self.pos + 1;
        loop {
            let tail = &self.text[i..];
            let Some(c) = tail.chars().next() else {
                return Err(self.fail(format!(
                    "the string starting at byte {open_at} is never closed"
                )));
            };
            if tail.starts_with("{{") {
                // Copied verbatim: a path never holds a quote, and `}}` ends the hole.
                let end = tail.find("}}").map_or(tail.len(), |e| e + 2);
                content.push_str(&tail[..end]);
                i += end;
            } else if c == quote {
                i += 1;
                break;
            } else if c == '\\' {
                let Some(e) = tail[1..].chars().next() else {
                    return Err(self.fail(format!(
                        "the string starting at byte {open_at} is never closed"
                    )));
                };
                content.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '\\' | '\'' | '"' => e,
                    other => {
                        return Err(self.fail(format!("unknown escape '\\{other}' in a string")))
                    }
                });
                i += 1 + e.len_utf8();
            } else {
                content.push(c);
                i += c.len_utf8();
            }
        }
        self.pos = i;
        if content.contains("{{") {
            let pieces = split_text(&content, false).map_err(|e| match e {
                ExprError::Limit { .. } => e,
                _ => self.fail(format!(
                    "in the string at byte {open_at}: {}",
                    crate::error::reason(&e)
                )),
            })?;
            self.leaf(Leaf::Text(pieces))
        } else {
            self.leaf(Leaf::Const(Value::String(content)))
        }
    }

    fn number(&mut self) -> Result<(), ExprError> {
        let bytes = self.rest().as_bytes();
        let mut n = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut integer = true;
        if bytes.get(n) == Some(&b'.') {
            integer = false;
            n += 1;
            n += bytes[n..].iter().take_while(|b| b.is_ascii_digit()).count();
        }
        if matches!(bytes.get(n), Some(b'e' | b'E')) {
            let mut m = n + 1;
            if matches!(bytes.get(m), Some(b'+' | b'-')) {
                m += 1;
            }
            let digits = bytes[m..].iter().take_while(|b| b.is_ascii_digit()).count();
            if digits > 0 {
                integer = false;
                n = m + digits;
            }
        }
        let literal = &self.rest()[..n];
        if let Some(c) = self.rest()[n..].chars().next() {
            if is_ident_char(c) && c != '-' || c == '.' {
                return Err(self.fail(format!(
                    "unexpected '{c}' after the number {literal} at byte {}",
                    self.pos
                )));
            }
        }
        let value = match literal.parse::<i64>() {
            Ok(i) if integer => Value::from(i),
            _ => literal
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| self.fail(format!("'{literal}' is not a finite number")))?,
        };
        self.pos += n;
        self.leaf(Leaf::Const(value))
    }

    /// A keyword or a function name in a condition.
    fn word(&mut self) -> Result<(), ExprError> {
        let len = self
            .rest()
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(self.rest().len());
        let word = self.rest()[..len].to_string();
        self.pos += len;
        let lower = word.to_ascii_lowercase();
        match lower.as_str() {
            "and" => return self.emit("&&", false),
            "or" => return self.emit("||", false),
            "in" if !self.after_value => {
                return Err(self.fail("'in' needs a value on its left".into()))
            }
            "in" => return self.emit("== __in", false),
            "not" => {
                let after = self.rest().trim_start();
                let skipped = self.rest().len() - after.len();
                let is_in = after.get(..2).is_some_and(|w| w.eq_ignore_ascii_case("in"))
                    && !after[2..].starts_with(|c: char| c.is_alphanumeric() || c == '_');
                if is_in {
                    if !self.after_value {
                        return Err(self.fail("'not in' needs a value on its left".into()));
                    }
                    self.pos += skipped + 2;
                    return self.emit("!= __in", false);
                }
                return self.emit("__not", false);
            }
            "true" => return self.leaf(Leaf::Const(Value::Bool(true))),
            "false" => return self.leaf(Leaf::Const(Value::Bool(false))),
            "null" | "none" => return self.leaf(Leaf::Const(Value::Null)),
            _ => {}
        }
        let function = FUNCTIONS.iter().find(|f| f.eq_ignore_ascii_case(&word));
        let called = self.rest().trim_start().starts_with('(');
        match function {
            Some(f) if called => self.emit(f, false),
            Some(f) => Err(self.fail(format!("'{f}' is a function: write {f}(...)"))),
            None if called => Err(self.fail(unknown_function(&word))),
            None if self.rest().starts_with(['.', '[']) => Err(self.fail(format!(
                "bare path starting with '{word}': write paths as {{{{{word}...}}}}"
            ))),
            None => Err(self.fail(format!(
                "unknown name '{word}': quote text ('{word}') and write paths as {{{{node.output.field}}}}"
            ))),
        }
    }

    /// A word inside a template hole: a keyword, a function name before `(`, or a path.
    fn hole_word(&mut self) -> Result<(), ExprError> {
        let end = self.path_len();
        let text = &self.rest()[..end];
        let simple = !text.contains(['.', '[', '-']);
        let called = self.rest()[end..].trim_start().starts_with('(');
        let keyword = matches!(
            text.to_ascii_lowercase().as_str(),
            "and" | "or" | "not" | "in" | "true" | "false" | "null" | "none"
        );
        if simple && (called || keyword) {
            self.word()
        } else {
            self.bare_path()
        }
    }

    /// The length of the path-shaped text at the current position.
    fn path_len(&self) -> usize {
        let mut end = 0;
        let mut in_index = false;
        for (i, c) in self.rest().char_indices() {
            let ok = if in_index {
                c.is_ascii_digit() || c == ']'
            } else {
                is_ident_char(c) || c == '.' || c == '['
            };
            if !ok {
                break;
            }
            in_index = match c {
                '[' => true,
                ']' => false,
                _ => in_index,
            };
            end = i + c.len_utf8();
        }
        end
    }

    /// A path (or `true`/`false`/`null`) inside a template hole.
    fn bare_path(&mut self) -> Result<(), ExprError> {
        let end = self.path_len();
        let bytes = self.rest();
        let word = &bytes[..end];
        let leaf = match word {
            "true" => Leaf::Const(Value::Bool(true)),
            "false" => Leaf::Const(Value::Bool(false)),
            "null" => Leaf::Const(Value::Null),
            _ => {
                Leaf::Path(parse_reference(word).map_err(|e| self.fail(crate::error::reason(&e)))?)
            }
        };
        self.pos += end;
        self.leaf(leaf)
    }

    fn operator(&mut self, c: char) -> Result<(), ExprError> {
        let two = self.rest().get(..2).unwrap_or("").to_string();
        let two = two.as_str();
        if matches!(two, "==" | "!=" | "<=" | ">=" | "&&" | "||") {
            self.pos += 2;
            return self.emit(two, false);
        }
        self.pos += c.len_utf8();
        let binary_arithmetic =
            matches!(c, '*' | '/') || matches!(c, '+' | '-') && self.after_value;
        if binary_arithmetic && self.mode == (Mode::Hole { arithmetic: false }) {
            return Err(self.fail(format!(
                "arithmetic is not allowed here: '{c}' in a workflow template (compute in a condition, or with an agent)"
            )));
        }
        match c {
            '(' => {
                self.open('(')?;
                self.emit("(", false)?;
                self.push_frame();
                Ok(())
            }
            ')' => {
                self.end_operand()?;
                self.close(')')?;
                self.frames.pop();
                self.emit(")", true)
            }
            '+' if !self.after_value => Ok(()),
            // After `not` or `in` (function names to evalexpr), `-` would subtract from the
            // name.
            '-' if self.out.ends_with(" __not") || self.out.ends_with(" __in") => {
                self.emit("__neg", false)
            }
            '+' | '-' | '*' | '/' | '<' | '>' | '!' => {
                let mut buf = [0u8; 4];
                self.emit(c.encode_utf8(&mut buf), false)
            }
            '[' => {
                self.open('[')?;
                self.emit("__list(", false)?;
                self.push_frame();
                Ok(())
            }
            ']' => {
                self.end_operand()?;
                self.close(']')?;
                self.frames.pop();
                self.emit(")", true)
            }
            ',' if self.brackets.is_empty() => {
                Err(self.fail("',' outside a list or a function call".into()))
            }
            ',' => {
                self.end_operand()?;
                self.emit(",", false)?;
                self.mark_operand_start();
                Ok(())
            }
            '?' => self.question(),
            ':' => self.colon(),
            '=' => Err(self.fail("use '==' to compare ('=' alone is not an operator)".into())),
            '&' | '|' => Err(self.fail(format!("use '{c}{c}' (or 'and'/'or')"))),
            other => Err(self.fail(format!(
                "unexpected character '{other}' at byte {}",
                self.pos - other.len_utf8()
            ))),
        }
    }

    /// The operand of the innermost bracket starts here.
    fn push_frame(&mut self) {
        self.frames.push(Frame {
            start: self.out.len(),
            ternaries: Vec::new(),
        });
    }

    fn frame(&mut self) -> &mut Frame {
        if self.frames.is_empty() {
            self.frames.push(Frame::default());
        }
        let last = self.frames.len() - 1;
        &mut self.frames[last]
    }

    fn mark_operand_start(&mut self) {
        let at = self.out.len();
        self.frame().start = at;
    }

    /// `?`: what came since the operand's start is the condition.
    fn question(&mut self) -> Result<(), ExprError> {
        if !self.after_value {
            return Err(self.fail(format!(
                "'?' at byte {} needs a condition on its left",
                self.pos - 1
            )));
        }
        if self.brackets.len() + 2 * (self.open_ternaries + 1) > MAX_NESTING {
            return Err(ExprError::Limit {
                what: "bracket nesting depth",
                limit: MAX_NESTING,
            });
        }
        let start = self.frame().start;
        self.out.insert_str(start, " __if((");
        self.open_ternaries += 1;
        self.frame().ternaries.push(Ternary::AwaitingElse);
        self.emit("),(", false)?;
        self.mark_operand_start();
        Ok(())
    }

    /// `:`: ends the then part of the innermost ternary still waiting for it (closing the
    /// ternaries nested in that then part).
    fn colon(&mut self) -> Result<(), ExprError> {
        if !self.after_value {
            return Err(self.fail(format!(
                "':' at byte {} needs a value on its left",
                self.pos - 1
            )));
        }
        while self.frame().ternaries.last() == Some(&Ternary::InElse) {
            self.frame().ternaries.pop();
            self.open_ternaries -= 1;
            self.emit("))", true)?;
        }
        match self.frame().ternaries.last_mut() {
            Some(t) => *t = Ternary::InElse,
            None => {
                return Err(self.fail(format!("':' at byte {} has no '?' before it", self.pos - 1)))
            }
        }
        self.emit("),(", false)?;
        self.mark_operand_start();
        Ok(())
    }

    /// The end of an operand (a closing bracket, a comma, the end of the text) closes the
    /// ternaries open at its level.
    fn end_operand(&mut self) -> Result<(), ExprError> {
        while let Some(t) = self.frame().ternaries.pop() {
            if t == Ternary::AwaitingElse {
                return Err(self.fail("a '?' has no ':' after it (write a ? b : c)".into()));
            }
            if !self.after_value {
                return Err(self.fail("the else part after ':' is empty".into()));
            }
            self.open_ternaries -= 1;
            self.emit("))", true)?;
        }
        Ok(())
    }
}

/// The message for a call of a function that does not exist.
pub(crate) fn unknown_function(name: &str) -> String {
    format!(
        "unknown function '{name}' (the functions are {})",
        FUNCTIONS.join(", ")
    )
}
