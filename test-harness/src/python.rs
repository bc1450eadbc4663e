//! The Python interpreter the tests run: the project's own virtual environment, `.venv` at
//! the workspace root, made by `.ci/run` from `.ci/python-requirements.txt` (or the one
//! `MESH_PYTHON` names). Python tests never use a system-wide pip: what they need is pinned
//! in that file, and a missing environment fails the test saying how to make it.

use std::path::PathBuf;

/// The workspace root (the parent of this crate).
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test harness lives in the workspace")
        .to_path_buf()
}

/// The interpreter of the project's virtual environment: `$MESH_PYTHON`, or
/// `.venv/bin/python` at the workspace root. Panics, saying how to make it, when it is not
/// there.
pub fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("MESH_PYTHON") {
        return PathBuf::from(path);
    }
    let path = workspace().join(".venv/bin/python");
    assert!(
        path.exists(),
        "the Python tests need the project's virtual environment at {}: make it with \
         `python3 -m venv .venv && .venv/bin/pip install -r .ci/python-requirements.txt` \
         (bash .ci/run does this)",
        path.display()
    );
    path
}
