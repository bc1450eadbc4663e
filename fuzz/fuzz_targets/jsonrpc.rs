//! A request to a workflow and an agent's reply, read as the node reads them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use messages::reply::{decode_reply, final_task, read_task};
use messages::Request;

fuzz_target!(|data: &[u8]| {
    match Request::from_slice(data) {
        Ok(request) => {
            let bytes = serde_json::to_vec(&request).expect("a request encodes");
            assert_eq!(Request::from_slice(&bytes).ok(), Some(request));
        }
        Err(response) => assert!(serde_json::to_vec(&*response).is_ok()),
    }
    if let Ok(reply) = decode_reply(data) {
        if let Some(task) = final_task(reply) {
            let _ = read_task(&task);
        }
    }
});
