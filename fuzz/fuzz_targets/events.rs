//! An event from a workflow's stream, a run record from KV, an agent's reply on a
//! response subject: decoded as the shell decodes them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use workflow_node::shell::run::wire::interpret_reply;
use workflow_node::shell::{Envelope, RunRecord};

fuzz_target!(|data: &[u8]| {
    if let Ok(envelope) = serde_json::from_slice::<Envelope>(data) {
        let bytes = serde_json::to_vec(&envelope).expect("an envelope encodes");
        assert!(serde_json::from_slice::<Envelope>(&bytes).is_ok());
    }
    if let Ok(record) = RunRecord::from_entry(data) {
        // Compared as written: a run's output of `null` reads back as none, which writes
        // the same.
        let bytes = serde_json::to_vec(&record).expect("a record encodes");
        let back: RunRecord = serde_json::from_slice(&bytes).expect("reads back");
        assert_eq!(serde_json::to_vec(&back).expect("encodes"), bytes);
    }
    let _ = interpret_reply(data);
});
