//! An LLM agent with shared limits (calls at once, requests and tokens per minute) under
//! the shipped secure configuration: served with the agents user's rights, it creates and
//! uses the limits' key-value buckets (`mesh_llm_slots`, `mesh_llm_rates`), streams its
//! answer to a caller, and the server logs no violation.

use agent_sdk::{Mesh, StubFile};
use serde_json::json;
use test_harness::openai::{Provider, Reply};

use crate::support::security::{Secure, WAIT};

const NS: &str = "mesh";

#[tokio::test]
async fn an_llm_agent_with_shared_limits_runs_with_the_agents_rights() {
    let secure = Secure::start();
    let provider = Provider::start().await;
    // The agents user takes requests for the example agents' names only: the LLM agent
    // serves as one of them.
    let yaml = format!(
        r#"
agents:
  - name: Echo
    model: {{base_url: "{}", name: test-model, stream: true, max_tokens: 50}}
    limits: {{key: shared-account, max_concurrency: 2, requests_per_minute: 100, tokens_per_minute: 100000}}
"#,
        provider.base_url()
    );
    let file = StubFile::parse(&yaml, "inline").unwrap_or_else(|e| panic!("{e:#?}"));
    let mut agents = secure.connect("agents").await;
    let _served = agent_sdk::serve_stubs(agents.client.clone(), NS, file)
        .await
        .expect("the LLM agent serves, its limits' buckets opened, as user agents");
    let alice = secure.connect("alice").await;
    let mesh = Mesh::new(alice.client.clone()).timeout(WAIT);
    for answer in ["first", "second"] {
        provider.push(Reply::streamed(&[answer]));
        let out = mesh.agent("Echo").call(json!({})).await.unwrap();
        assert_eq!(out, json!({"text": answer}));
    }
    assert_eq!(agents.errors().await, Vec::<String>::new());
    assert_eq!(secure.violations_logged(), Vec::<String>::new());
}
