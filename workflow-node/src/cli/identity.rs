//! Who the commands are on the mesh: `--nkey-seed-file` signs what a command sends
//! (`approve`, `reject`, `runs cancel`, `run`), and `--approver NAME=U…` /
//! `--operator-key U…` tell a node it hosts (`serve`, `run --workflows`) whose keys to
//! trust (see `shell::identity`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_sdk::Signer;
use anyhow::{Context, Result};

use crate::definition::{Approver, NodeKind, Workflow};
use crate::shell::Config;

/// The key a command signs with.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SignArgs {
    /// A file holding an NKey user seed (`SU…`; a `.creds` file's seed works too): signs
    /// the request, proving who sends it. Approvals need an approver's key, cancels the
    /// key that started the run or an operator's.
    #[arg(long, env = "MESH_NKEY_SEED_FILE", value_name = "PATH")]
    pub nkey_seed_file: Option<PathBuf>,
}

impl SignArgs {
    /// The signer of `--nkey-seed-file`, if given; an error names the file and the fault.
    pub fn signer(&self) -> Result<Option<Signer>> {
        let Some(path) = &self.nkey_seed_file else {
            return Ok(None);
        };
        Signer::from_seed_file(path)
            .map(Some)
            .with_context(|| format!("--nkey-seed-file {}", path.display()))
    }
}

/// The keys a node trusts.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TrustArgs {
    /// Binds an approver name that workflows list in `approvers` to an NKey user public
    /// key: a decision signed by the key counts as the name's (repeatable).
    #[arg(long = "approver", value_name = "NAME=UKEY", value_parser = approver_binding,
          env = "MESH_APPROVERS", value_delimiter = ',')]
    pub approvers: Vec<(String, String)>,
    /// An operator's NKey user public key: decides approvals that list no approvers and
    /// may cancel any run (repeatable).
    #[arg(long = "operator-key", value_name = "UKEY", value_parser = user_key,
          env = "MESH_OPERATOR_KEYS", value_delimiter = ',')]
    pub operators: Vec<String>,
}

impl TrustArgs {
    /// Sets `config`'s approvers and operators from these arguments.
    pub fn apply(&self, config: &mut Config) {
        config.approvers = self.approvers.iter().cloned().collect();
        config.operators = self.operators.clone();
    }
}

fn approver_binding(text: &str) -> std::result::Result<(String, String), String> {
    let (name, key) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=UKEY"))?;
    let name = name.trim();
    match Approver::parse(name) {
        Ok(Approver::Name(_)) => {}
        _ => {
            return Err(format!(
                "'{name}' is not an approver name (letters, digits, _ . @ -)"
            ))
        }
    }
    Ok((name.to_owned(), user_key(key)?))
}

fn user_key(text: &str) -> std::result::Result<String, String> {
    let key = text.trim();
    if agent_sdk::signing::is_user_public_key(key) {
        Ok(key.to_owned())
    } else if key.starts_with("SU") {
        Err("that is a seed, a secret: give the public key (U…)".into())
    } else {
        Err(format!("'{key}' is not an NKey user public key (U…)"))
    }
}

/// Arguments of `keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Where the seed goes (a new file, readable by its owner only): what
    /// `--nkey-seed-file` then names. The public key (`U…`) is printed, for `serve
    /// --approver NAME=U…`, `--operator-key U…` and workflows' `approvers`.
    pub seed_file: PathBuf,
}

/// Runs `keygen`: exit 0, or 1 when the file exists or cannot be written.
pub fn keygen(args: KeygenArgs) -> ExitCode {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let signer = Signer::generate();
    let path = &args.seed_file;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| writeln!(f, "{}", signer.seed()));
    match written {
        Ok(()) => {
            println!("{}", signer.public_key());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: writing the seed to {}: {e}", path.display());
            ExitCode::from(1)
        }
    }
}

/// For a node hosted by a command for its own runs (`run --workflows`, `test`, `demo`):
/// binds each approver name `workflows` list that `config` leaves unbound to a fresh key
/// of this process, and returns those keys by name (`test` signs its cases' decisions
/// with them). Nobody else holds them: a gate only they may decide waits for its timeout.
pub fn bind_hosted(config: &mut Config, workflows: &[Workflow]) -> BTreeMap<String, Signer> {
    let mut made = BTreeMap::new();
    for workflow in workflows {
        for node in &workflow.nodes {
            let NodeKind::Approval(def) = &node.kind else {
                continue;
            };
            for entry in &def.approvers {
                if let Ok(Approver::Name(name)) = Approver::parse(entry) {
                    if !config.approvers.contains_key(name) && !made.contains_key(name) {
                        made.insert(name.to_owned(), Signer::generate());
                    }
                }
            }
        }
    }
    for (name, signer) in &made {
        config
            .approvers
            .insert(name.clone(), signer.public_key().to_owned());
    }
    made
}
