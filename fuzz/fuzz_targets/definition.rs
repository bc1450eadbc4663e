//! A workflow file in YAML and in JSON, through parse and validate: it loads, or every
//! problem says what is wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use workflow_node::definition::parse_str;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for origin in ["fuzz.yaml", "fuzz.json"] {
        if let Err(problems) = parse_str(text, origin) {
            assert!(!problems.is_empty());
            assert!(problems.iter().all(|p| !p.message.trim().is_empty()));
        }
    }
});
