//! `workflow-node health [--addr ADDR] [--live]`: asks a running `serve` or `stub-agents`
//! for its readiness (`/readyz`) or liveness (`/livez`) and exits 0 when it answers 200.
//! It is the container image's `HEALTHCHECK`, which has neither a shell nor curl: the
//! address defaults to `MESH_HEALTH_ADDR`, the one the probes listen on, with an
//! unspecified host (`0.0.0.0`, `[::]`) asked on loopback.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `health`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the probes listen (`serve --health-addr`).
    #[arg(long, value_name = "ADDR", env = "MESH_HEALTH_ADDR")]
    pub addr: SocketAddr,
    /// Ask for liveness (`/livez`) instead of readiness (`/readyz`).
    #[arg(long)]
    pub live: bool,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 3.0)]
    pub timeout: f64,
}

/// Runs `health`: exit 0 on 200, 1 on any other answer (the body printed), 2 when nothing
/// answers.
pub fn run(args: Args) -> ExitCode {
    let path = if args.live { "/livez" } else { "/readyz" };
    let addr = loopback_if_unspecified(args.addr);
    let timeout = Duration::from_secs_f64(args.timeout.max(0.1));
    match get(addr, path, timeout) {
        Ok((200, body)) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprint!("http://{addr}{path}: {status} {body}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("http://{addr}{path}: {e}");
            ExitCode::from(2)
        }
    }
}

fn loopback_if_unspecified(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

/// A plain HTTP/1.1 `GET` with `Connection: close`: the status and the body (an error
/// when nothing answers in `timeout`, or the answer is not HTTP).
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}
