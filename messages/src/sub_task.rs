//! Sub-task ids: the task id a workflow node gives one attempt of one call,
//! `{execution}_{node}_{slot}_{attempt}`. It is one subject token (it ends the response and
//! status subjects), so the execution id has no `_`; the node id may have some, which is
//! why the id is parsed from both ends. The slot's code (which map item, fork branch or
//! loop iteration) is the workflow node's business: here it is an opaque token without
//! `_`. Agents need only [`slot_key`], to recognise retries of the same call. The id carries
//! no secret: it appears in subjects and records others read (the proof that a reply comes
//! from whoever received the call is in [`crate::call_proof`]).

/// The parts of a sub-task id, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubTaskId<'a> {
    /// The run's execution id (no `_`).
    pub execution: &'a str,
    /// The node id (may contain `_`).
    pub node: &'a str,
    /// The slot's code (no `_`).
    pub slot: &'a str,
    /// The attempt, counted from 1.
    pub attempt: u32,
}

impl SubTaskId<'_> {
    /// `{execution}_{node}_{slot}_{attempt}`.
    pub fn format(&self) -> String {
        let SubTaskId {
            execution,
            node,
            slot,
            attempt,
        } = self;
        format!("{execution}_{node}_{slot}_{attempt}")
    }

    /// The inverse of [`SubTaskId::format`]: `None` unless the id has four non-empty
    /// fields and ends with a decimal attempt. The alphabets of the execution id and the
    /// slot code are left to the caller to check.
    pub fn parse(id: &str) -> Option<SubTaskId<'_>> {
        let mut fields = id.rsplitn(3, '_');
        let attempt = fields.next()?.parse().ok()?;
        let slot = fields.next()?;
        let (execution, node) = fields.next()?.split_once('_')?;
        if [execution, node, slot].iter().any(|f| f.is_empty()) {
            return None;
        }
        Some(SubTaskId {
            execution,
            node,
            slot,
            attempt,
        })
    }
}

/// The sub-task id without its attempt: the same for every attempt of one call (run,
/// node, slot). An id without `_` (a plain caller's task id) is its own key.
pub fn slot_key(id: &str) -> &str {
    id.rsplit_once('_').map_or(id, |(head, _)| head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_with_underscores_in_the_node() {
        let id = SubTaskId {
            execution: "e-1",
            node: "check_stock",
            slot: "i3",
            attempt: 2,
        };
        assert_eq!(id.format(), "e-1_check_stock_i3_2");
        assert_eq!(SubTaskId::parse(&id.format()), Some(id));
    }

    #[test]
    fn malformed_ids_do_not_parse() {
        for bad in [
            "",
            "garbage",
            "a_b_x_",
            "a_b_x_one",
            "a__x_1",
            "_b_x_1",
            "a_b__1",
            "a_x_1",
        ] {
            assert_eq!(SubTaskId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn slot_keys_drop_the_attempt() {
        assert_eq!(slot_key("e1_node_a_0_2"), "e1_node_a_0");
        assert_eq!(slot_key("plain"), "plain");
    }
}
