//! Compiled expressions (conditions and template arithmetic): evalexpr parses the lexed text
//! into its operator tree once, at compile time, and that tree is turned into an [`Expr`]
//! whose leaves are our own values. Evaluation walks the [`Expr`] on JSON values: evalexpr's
//! own evaluator has no objects, no `null` ordering rule and no numeric-string rule, so it
//! decides structure only.

use crate::error::{clip, ExprError};
use crate::lex::{lex, Lexed, Mode};
use crate::limits::MAX_EXPR_DEPTH;
use crate::template::{resolve_pieces, Piece};
use crate::value::{arith, concat, describe, json_eq, negate, order, type_name, ArithOp};
use crate::{Path, Scope};
use evalexpr::{DefaultNumericTypes, Node, Operator};
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;

/// A value in an expression.
#[derive(Debug, Clone)]
pub(crate) enum Leaf {
    /// A literal: string, number, `true`, `false`, `null`.
    Const(Value),
    /// `{{path}}` in a condition, or a bare path in template arithmetic: the typed value.
    Path(Path),
    /// A string literal holding templates (`'{{a.output.x}}'`): the text form of the values.
    Text(Vec<Piece>),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A built-in function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Length,
    Contains,
    ToJson,
    FromJson,
    Coalesce,
    Concat,
}

impl Func {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Func::Length => "length",
            Func::Contains => "contains",
            Func::ToJson => "toJSON",
            Func::FromJson => "fromJSON",
            Func::Coalesce => "coalesce",
            Func::Concat => "concat",
        }
    }
}

/// An expression tree over [`Leaf`] indexes.
#[derive(Debug, Clone)]
pub(crate) enum Expr {
    Leaf(usize),
    List(Vec<Expr>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    In {
        negated: bool,
        item: Box<Expr>,
        within: Box<Expr>,
    },
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
    /// `a ? b : c`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// A compiled expression: the tree and the values its leaves stand for.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub(crate) expr: Expr,
    pub(crate) leaves: Vec<Leaf>,
}

/// Why a conversion failed.
enum ConvError {
    Parse(String),
    Limit,
}

impl From<String> for ConvError {
    fn from(reason: String) -> Self {
        ConvError::Parse(reason)
    }
}

type Conv<T> = Result<T, ConvError>;

impl Compiled {
    /// Lexes, parses and converts `text`.
    pub(crate) fn compile(text: &str, mode: Mode) -> Result<Compiled, ExprError> {
        let what = mode.what();
        let fail = |reason: String| ExprError::Parse {
            what,
            text: clip(text),
            reason,
        };
        let Lexed { src, leaves } = lex(text, mode)?;
        if src.trim().is_empty() {
            return Err(fail("the expression is empty".into()));
        }
        let tree = evalexpr::build_operator_tree::<DefaultNumericTypes>(&src)
            .map_err(|e| fail(format!("malformed expression ({e})")))?;
        let mut converter = Converter { leaves };
        match converter.convert(&tree, 0) {
            Ok(expr) => Ok(Compiled {
                expr,
                leaves: converter.leaves,
            }),
            Err(ConvError::Parse(reason)) => Err(fail(reason)),
            Err(ConvError::Limit) => Err(ExprError::Limit {
                what: "expression depth",
                limit: MAX_EXPR_DEPTH,
            }),
        }
    }

    /// Every path the expression names, in order of appearance.
    pub(crate) fn paths(&self) -> impl Iterator<Item = &Path> {
        self.leaves
            .iter()
            .flat_map(|leaf| -> Box<dyn Iterator<Item = &Path> + '_> {
                match leaf {
                    Leaf::Const(_) => Box::new(std::iter::empty()),
                    Leaf::Path(p) => Box::new(std::iter::once(p)),
                    Leaf::Text(pieces) => Box::new(pieces.iter().flat_map(Piece::paths)),
                }
            })
    }

    /// Evaluates the expression; the error is a reason, without the expression's text.
    pub(crate) fn eval<'a>(&'a self, scope: &'a dyn Scope) -> Result<Cow<'a, Value>, String> {
        self.eval_expr(&self.expr, scope)
    }

    fn eval_expr<'a>(
        &'a self,
        e: &'a Expr,
        scope: &'a dyn Scope,
    ) -> Result<Cow<'a, Value>, String> {
        Ok(match e {
            Expr::Leaf(i) => match self.leaves.get(*i) {
                Some(Leaf::Const(v)) => Cow::Borrowed(v),
                Some(Leaf::Path(p)) => scope.lookup(p).unwrap_or(Cow::Owned(Value::Null)),
                Some(Leaf::Text(pieces)) => {
                    Cow::Owned(Value::String(resolve_pieces(pieces, scope)?))
                }
                None => return Err("internal error: unknown value".into()),
            },
            Expr::List(items) => Cow::Owned(Value::Array(
                items
                    .iter()
                    .map(|i| self.eval_expr(i, scope).map(Cow::into_owned))
                    .collect::<Result<_, _>>()?,
            )),
            Expr::Not(x) => Cow::Owned(Value::Bool(!self.boolean(x, scope, "not")?)),
            Expr::Neg(x) => Cow::Owned(negate(&*self.eval_expr(x, scope)?)?),
            Expr::And(a, b) => Cow::Owned(Value::Bool(
                self.boolean(a, scope, "and")? && self.boolean(b, scope, "and")?,
            )),
            Expr::Or(a, b) => Cow::Owned(Value::Bool(
                self.boolean(a, scope, "or")? || self.boolean(b, scope, "or")?,
            )),
            Expr::Cmp(op, a, b) => {
                let (a, b) = (self.eval_expr(a, scope)?, self.eval_expr(b, scope)?);
                let result = match op {
                    CmpOp::Eq => json_eq(&a, &b),
                    CmpOp::Ne => !json_eq(&a, &b),
                    CmpOp::Lt => order(&a, &b)? == Ordering::Less,
                    CmpOp::Le => order(&a, &b)? != Ordering::Greater,
                    CmpOp::Gt => order(&a, &b)? == Ordering::Greater,
                    CmpOp::Ge => order(&a, &b)? != Ordering::Less,
                };
                Cow::Owned(Value::Bool(result))
            }
            Expr::In {
                negated,
                item,
                within,
            } => {
                let item = self.eval_expr(item, scope)?;
                let found = match &**within {
                    // A list literal is searched without building it.
                    Expr::List(options) => {
                        let mut found = false;
                        for option in options {
                            if json_eq(&item, &*self.eval_expr(option, scope)?) {
                                found = true;
                                break;
                            }
                        }
                        found
                    }
                    other => contains(&*self.eval_expr(other, scope)?, &item)?,
                };
                Cow::Owned(Value::Bool(found != *negated))
            }
            Expr::Arith(op, a, b) => {
                let (a, b) = (self.eval_expr(a, scope)?, self.eval_expr(b, scope)?);
                Cow::Owned(arith(*op, &a, &b)?)
            }
            Expr::Cond(c, then, other) => {
                if self.boolean(c, scope, "?")? {
                    self.eval_expr(then, scope)?
                } else {
                    self.eval_expr(other, scope)?
                }
            }
            // Lazy: the arguments after the first non-null one are not evaluated.
            Expr::Call(Func::Coalesce, args) => {
                for a in args {
                    let v = self.eval_expr(a, scope)?;
                    if !v.is_null() {
                        return Ok(v);
                    }
                }
                Cow::Owned(Value::Null)
            }
            Expr::Call(f, args) => {
                let mut values = Vec::with_capacity(args.len());
                for a in args {
                    values.push(self.eval_expr(a, scope)?);
                }
                Cow::Owned(call(*f, &values)?)
            }
        })
    }

    fn boolean(&self, e: &Expr, scope: &dyn Scope, op: &str) -> Result<bool, String> {
        match &*self.eval_expr(e, scope)? {
            Value::Bool(b) => Ok(*b),
            other => Err(format!(
                "'{op}' needs true or false, got {}",
                describe(other)
            )),
        }
    }
}

/// Whether `haystack` holds `needle`: an array member, a substring, an object key; nothing
/// is in `null`.
fn contains(haystack: &Value, needle: &Value) -> Result<bool, String> {
    match (haystack, needle) {
        (Value::Array(items), _) => Ok(items.iter().any(|i| json_eq(i, needle))),
        (Value::String(s), Value::String(n)) => Ok(s.contains(n.as_str())),
        (Value::Object(m), Value::String(k)) => Ok(m.contains_key(k)),
        (Value::Null, _) => Ok(false),
        _ => Err(format!(
            "cannot look for {} in {}",
            describe(needle),
            describe(haystack)
        )),
    }
}

pub(crate) fn call(f: Func, args: &[Cow<'_, Value>]) -> Result<Value, String> {
    match (f, args) {
        (Func::Length, [x]) => match &**x {
            Value::String(s) => Ok(Value::from(s.chars().count())),
            Value::Array(a) => Ok(Value::from(a.len())),
            Value::Object(o) => Ok(Value::from(o.len())),
            Value::Null => Ok(Value::from(0)),
            other => Err(format!("length() of {}", describe(other))),
        },
        (Func::Contains, [h, n]) => contains(h, n).map(Value::Bool),
        (Func::ToJson, [x]) => Ok(Value::String(x.to_string())),
        (Func::Coalesce, _) => Ok(args
            .iter()
            .find(|v| !v.is_null())
            .map_or(Value::Null, |v| (**v).clone())),
        (Func::Concat, _) => Ok(concat(
            args.iter()
                .filter(|v| !v.is_null())
                .map(|v| (**v).clone())
                .collect(),
        )),
        (Func::FromJson, [x]) => match &**x {
            Value::String(s) => {
                serde_json::from_str(s).map_err(|e| format!("fromJSON(): not JSON ({e})"))
            }
            other => Err(format!(
                "fromJSON() needs a string, got {}",
                type_name(other)
            )),
        },
        _ => Err("internal error: wrong number of arguments".into()),
    }
}

/// Turns evalexpr's operator tree into an [`Expr`].
struct Converter {
    leaves: Vec<Leaf>,
}

fn function_name(node: &Node) -> Option<&str> {
    match node.operator() {
        Operator::FunctionIdentifier { identifier } => Some(identifier),
        _ => None,
    }
}

impl Converter {
    fn convert(&mut self, node: &Node, depth: usize) -> Conv<Expr> {
        if depth > MAX_EXPR_DEPTH {
            return Err(ConvError::Limit);
        }
        let children = node.children();
        let binary = |this: &mut Self| -> Conv<(Box<Expr>, Box<Expr>)> {
            match children {
                [a, b] => Ok((
                    Box::new(this.convert(a, depth + 1)?),
                    Box::new(this.convert(b, depth + 1)?),
                )),
                _ => Err("an operator is missing an operand".to_string().into()),
            }
        };
        let unary = |this: &mut Self| -> Conv<Box<Expr>> {
            match children {
                [a] => Ok(Box::new(this.convert(a, depth + 1)?)),
                _ => Err("an operator is missing an operand".to_string().into()),
            }
        };
        Ok(match node.operator() {
            Operator::RootNode => match children {
                [] => return Err("empty parentheses".to_string().into()),
                [only] => self.convert(only, depth + 1)?,
                _ => {
                    return Err("an operator is missing between two values"
                        .to_string()
                        .into())
                }
            },
            Operator::VariableIdentifierRead { identifier } => Expr::Leaf(self.leaf(identifier)?),
            Operator::Const { value } => {
                let value = match value {
                    evalexpr::Value::Boolean(b) => Value::Bool(*b),
                    evalexpr::Value::Int(i) => Value::from(*i),
                    evalexpr::Value::String(s) => Value::String(s.clone()),
                    evalexpr::Value::Empty => Value::Null,
                    _ => return Err("unsupported literal".to_string().into()),
                };
                self.leaves.push(Leaf::Const(value));
                Expr::Leaf(self.leaves.len() - 1)
            }
            Operator::FunctionIdentifier { identifier } => {
                let [arg] = children else {
                    return Err("a function call is malformed".to_string().into());
                };
                match identifier.as_str() {
                    "__list" => Expr::List(self.args(arg, depth)?),
                    "__not" => Expr::Not(Box::new(self.convert(arg, depth + 1)?)),
                    "__neg" => Expr::Neg(Box::new(self.convert(arg, depth + 1)?)),
                    "__in" => return Err("'in' needs a value on its left".to_string().into()),
                    "__if" => match <[Expr; 3]>::try_from(self.args(arg, depth)?) {
                        Ok([c, then, other]) => {
                            Expr::Cond(Box::new(c), Box::new(then), Box::new(other))
                        }
                        Err(_) => return Err("a '? :' is malformed".to_string().into()),
                    },
                    name => {
                        // `None`: any number of arguments.
                        let (func, arity) = match name {
                            "length" => (Func::Length, Some(1)),
                            "contains" => (Func::Contains, Some(2)),
                            "toJSON" => (Func::ToJson, Some(1)),
                            "fromJSON" => (Func::FromJson, Some(1)),
                            "coalesce" => (Func::Coalesce, None),
                            "concat" => (Func::Concat, None),
                            _ => {
                                return Err("an operator is missing between two values"
                                    .to_string()
                                    .into())
                            }
                        };
                        let args = self.args(arg, depth)?;
                        match arity {
                            Some(n) if args.len() != n => {
                                return Err(format!(
                                    "{name}() takes {n} argument{}, got {}",
                                    if n == 1 { "" } else { "s" },
                                    args.len()
                                )
                                .into())
                            }
                            _ => {}
                        }
                        Expr::Call(func, args)
                    }
                }
            }
            Operator::Neg => Expr::Neg(unary(self)?),
            Operator::Not => Expr::Not(unary(self)?),
            Operator::Add => binary(self).map(|(a, b)| Expr::Arith(ArithOp::Add, a, b))?,
            Operator::Sub => binary(self).map(|(a, b)| Expr::Arith(ArithOp::Sub, a, b))?,
            Operator::Mul => binary(self).map(|(a, b)| Expr::Arith(ArithOp::Mul, a, b))?,
            Operator::Div => binary(self).map(|(a, b)| Expr::Arith(ArithOp::Div, a, b))?,
            Operator::And => binary(self).map(|(a, b)| Expr::And(a, b))?,
            Operator::Or => binary(self).map(|(a, b)| Expr::Or(a, b))?,
            Operator::Eq => self.comparison(CmpOp::Eq, children, depth)?,
            Operator::Neq => self.comparison(CmpOp::Ne, children, depth)?,
            Operator::Lt => self.comparison(CmpOp::Lt, children, depth)?,
            Operator::Leq => self.comparison(CmpOp::Le, children, depth)?,
            Operator::Gt => self.comparison(CmpOp::Gt, children, depth)?,
            Operator::Geq => self.comparison(CmpOp::Ge, children, depth)?,
            Operator::Tuple => {
                return Err(
                    "',' is only allowed in a list or between function arguments"
                        .to_string()
                        .into(),
                )
            }
            other => return Err(format!("unsupported operator '{other}'").into()),
        })
    }

    /// A comparison. `not` binds looser than comparisons (`not a == b` is `not (a == b)`), and
    /// `a in b` arrives as `a == __in b`.
    fn comparison(&mut self, op: CmpOp, children: &[Node], depth: usize) -> Conv<Expr> {
        if depth > MAX_EXPR_DEPTH {
            return Err(ConvError::Limit);
        }
        let [lhs, rhs] = children else {
            return Err("a comparison is missing an operand".to_string().into());
        };
        if function_name(lhs) == Some("__not") {
            let [inner] = lhs.children() else {
                return Err("'not' is missing its operand".to_string().into());
            };
            let pair = [inner.clone(), rhs.clone()];
            return Ok(Expr::Not(Box::new(self.comparison(
                op,
                &pair,
                depth + 1,
            )?)));
        }
        let item = Box::new(self.convert(lhs, depth + 1)?);
        if function_name(rhs) == Some("__in") {
            let negated = match op {
                CmpOp::Eq => false,
                CmpOp::Ne => true,
                _ => return Err("'in' cannot follow a comparison".to_string().into()),
            };
            let [within] = rhs.children() else {
                return Err("'in' needs a list, a path or a string on its right"
                    .to_string()
                    .into());
            };
            // `x in (1, 2)` reads as a list, like Python's tuples.
            let within = match (within.operator(), within.children()) {
                (Operator::RootNode, [t]) if *t.operator() == Operator::Tuple => {
                    Expr::List(self.args(within, depth)?)
                }
                _ => self.convert(within, depth + 1)?,
            };
            return Ok(Expr::In {
                negated,
                item,
                within: Box::new(within),
            });
        }
        Ok(Expr::Cmp(op, item, Box::new(self.convert(rhs, depth + 1)?)))
    }

    /// The arguments in `f(a, b)` or the members of `[a, b]`: `node` is the parenthesised group.
    fn args(&mut self, node: &Node, depth: usize) -> Conv<Vec<Expr>> {
        match (node.operator(), node.children()) {
            (Operator::RootNode, []) => Ok(Vec::new()),
            (Operator::RootNode, [t]) if *t.operator() == Operator::Tuple => t
                .children()
                .iter()
                .map(|c| self.convert(c, depth + 2))
                .collect(),
            _ => Ok(vec![self.convert(node, depth + 1)?]),
        }
    }

    fn leaf(&self, identifier: &str) -> Conv<usize> {
        identifier
            .strip_prefix("__v")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < self.leaves.len())
            .ok_or_else(|| format!("unknown name '{identifier}'").into())
    }
}
