//! What can be told about an expression without values, for a definition's validator:
//! a function applied to literals it cannot take (`length(5)`, `fromJSON('nope')`), and
//! which paths are compared with which literals (`{{a.status}} == 'sucess'`), so that the
//! caller, who knows what a path may hold, can say a literal is not among its values.

use std::borrow::Cow;

use serde_json::Value;

use crate::ast::{call, CmpOp, Compiled, Expr, Leaf};
use crate::template::{Hole, Piece};
use crate::Path;

impl Compiled {
    /// Every sub-expression, parents before children.
    fn visit<'s>(&'s self, e: &'s Expr, f: &mut dyn FnMut(&'s Expr)) {
        f(e);
        match e {
            Expr::Leaf(_) => {}
            Expr::Not(x) | Expr::Neg(x) => self.visit(x, f),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(_, a, b) | Expr::Arith(_, a, b) => {
                self.visit(a, f);
                self.visit(b, f);
            }
            Expr::In { item, within, .. } => {
                self.visit(item, f);
                self.visit(within, f);
            }
            Expr::List(items) | Expr::Call(_, items) => {
                items.iter().for_each(|i| self.visit(i, f));
            }
            Expr::Cond(c, a, b) => {
                self.visit(c, f);
                self.visit(a, f);
                self.visit(b, f);
            }
        }
    }

    /// The path a value stands for: `{{p}}`, or `'{{p}}'` (its text form, which for the
    /// strings a status or an id holds is the same).
    fn path_of(&self, e: &Expr) -> Option<&Path> {
        let Expr::Leaf(i) = e else { return None };
        match self.leaves.get(*i)? {
            Leaf::Path(p) => Some(p),
            Leaf::Text(pieces) => match pieces.as_slice() {
                [Piece::Hole(Hole::Path(p))] => Some(p),
                _ => None,
            },
            Leaf::Const(_) => None,
        }
    }

    fn literal(&self, e: &Expr) -> Option<&Value> {
        let Expr::Leaf(i) = e else { return None };
        match self.leaves.get(*i)? {
            Leaf::Const(v) => Some(v),
            _ => None,
        }
    }

    /// `(path, literal)` for every `path == literal`, `path != literal` (either side) and
    /// every literal of `path in [...]`.
    pub(crate) fn literal_comparisons(&self) -> Vec<(&Path, &Value)> {
        let mut out = Vec::new();
        self.visit(&self.expr, &mut |e| match e {
            Expr::Cmp(CmpOp::Eq | CmpOp::Ne, a, b) => {
                let pair = match (self.path_of(a), self.literal(b)) {
                    (Some(p), Some(v)) => Some((p, v)),
                    _ => self.path_of(b).zip(self.literal(a)),
                };
                out.extend(pair);
            }
            Expr::In { item, within, .. } => {
                if let (Some(p), Expr::List(options)) = (self.path_of(item), &**within) {
                    out.extend(
                        options
                            .iter()
                            .filter_map(|o| self.literal(o))
                            .map(|v| (p, v)),
                    );
                }
            }
            _ => {}
        });
        out
    }

    /// One message per function applied to literals only that fails on them.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.visit(&self.expr, &mut |e| {
            if let Expr::Call(f, args) = e {
                let values: Option<Vec<Cow<'_, Value>>> = args
                    .iter()
                    .map(|a| self.literal(a).map(Cow::Borrowed))
                    .collect();
                if let Some(Err(reason)) = values.map(|v| call(*f, &v)) {
                    out.push(format!("{}() always fails here: {reason}", f.name()));
                }
            }
        });
        out
    }
}
