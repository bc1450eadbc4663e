//! A TCP proxy on loopback that injects network faults between a client (a replica, an
//! agent, a caller) and a nats-server, without root: it delays every byte, swallows
//! everything (a black hole: both ends believe the connection is up), resets the live
//! connections (an RST, as a crashed peer's kernel sends), or refuses new ones (a
//! partition). netem is not in this kernel and iptables needs a namespace; a proxy reaches
//! the same faults for any process that can be pointed at an address.
//!
//! Faults apply to live connections as well as new ones: a chunk read while a fault holds
//! gets that fault. Order is kept per direction (a delay delays each chunk in turn). A
//! hold keeps what it reads, in order, until the fault changes: a message held up in the
//! network for as long as a test wants (a stalled connection, not a reset one), then
//! delivered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Pass every byte at once.
    #[default]
    Pass,
    /// Pass every chunk after this delay.
    Delay(Duration),
    /// Read and drop everything, both ways; connections stay open.
    BlackHole,
    /// Reset the live connections and every new one at once: the server is unreachable.
    Refuse,
    /// Keep everything read, in order, and pass it on once the fault changes to another
    /// (dropped by `Refuse` or `BlackHole`); connections stay open.
    Hold,
}

/// A proxy in front of one upstream address; stops when dropped (its connections too).
/// Faults are set per direction: *up* is what the client sends to the server, *down* what
/// the server sends to the client.
pub struct Proxy {
    addr: SocketAddr,
    up: watch::Sender<Fault>,
    down: watch::Sender<Fault>,
    cuts: watch::Sender<u64>,
    swallowed: Arc<watch::Sender<Swallowed>>,
    held: Arc<watch::Sender<Swallowed>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the black hole (or the hold) took: how many bytes, and the last [`KEPT`] of them.
#[derive(Debug, Default)]
struct Swallowed {
    bytes: u64,
    tail: Vec<u8>,
}

/// How many swallowed bytes are kept for [`Proxy::until_swallowed`].
const KEPT: usize = 1 << 20;

impl Swallowed {
    fn add(&mut self, chunk: &[u8]) {
        self.bytes += u64::try_from(chunk.len()).unwrap_or(u64::MAX);
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > KEPT {
            let extra = self.tail.len() - KEPT;
            self.tail.drain(..extra);
        }
    }
}

impl Proxy {
    /// Listens on an ephemeral loopback port and carries every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (up, up_rx) = watch::channel(Fault::Pass);
        let (down, down_rx) = watch::channel(Fault::Pass);
        let (cuts, cuts_rx) = watch::channel(0u64);
        let swallowed = Arc::new(watch::Sender::new(Swallowed::default()));
        let held = Arc::new(watch::Sender::new(Swallowed::default()));
        let wires = Wires {
            up: up_rx,
            down: down_rx,
            cuts: cuts_rx,
            swallowed: swallowed.clone(),
            held: held.clone(),
        };
        let task = tokio::spawn(accept(listener, upstream, wires));
        Ok(Proxy {
            addr,
            up,
            down,
            cuts,
            swallowed,
            held,
            task,
        })
    }

    /// Starts a proxy in front of a `nats://host:port` URL.
    pub async fn for_url(url: &str) -> std::io::Result<Proxy> {
        let hostport = url.trim_start_matches("nats://");
        let upstream = tokio::net::lookup_host(hostport)
            .await?
            .next()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no address: {url}"),
                )
            })?;
        Proxy::start(upstream).await
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `nats://127.0.0.1:{port}` of the proxy.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Applies `fault` both ways from now on, to live connections and new ones. `Refuse`
    /// also resets the live ones.
    pub fn set(&self, fault: Fault) {
        self.down.send_replace(fault);
        self.set_up(fault);
    }

    /// Applies `fault` to what clients send (the server does not get it) from now on.
    /// `Refuse` refuses both ways.
    pub fn set_up(&self, fault: Fault) {
        self.up.send_replace(fault);
        if fault == Fault::Refuse {
            self.down.send_replace(fault);
            self.cut();
        }
    }

    /// Applies `fault` to what the server sends (clients do not get it) from now on.
    /// `Refuse` refuses both ways.
    pub fn set_down(&self, fault: Fault) {
        self.down.send_replace(fault);
        if fault == Fault::Refuse {
            self.set_up(fault);
        }
    }

    /// Waits until the black hole has swallowed at least `bytes` bytes in all.
    pub async fn swallowed(&self, bytes: u64) {
        let mut rx = self.swallowed.subscribe();
        let _ = rx.wait_for(|s| s.bytes >= bytes).await;
    }

    /// Waits until the black hole has swallowed `needle` (among the last MiB it took):
    /// a given message is known lost.
    pub async fn until_swallowed(&self, needle: &[u8]) {
        let mut rx = self.swallowed.subscribe();
        let found = |s: &Swallowed| s.tail.windows(needle.len().max(1)).any(|w| w == needle);
        let _ = rx.wait_for(found).await;
    }

    /// Waits until a hold has taken `needle` (among the last MiB it took): a given
    /// message is known to be held up.
    pub async fn until_held(&self, needle: &[u8]) {
        let mut rx = self.held.subscribe();
        let found = |s: &Swallowed| s.tail.windows(needle.len().max(1)).any(|w| w == needle);
        let _ = rx.wait_for(found).await;
    }

    /// Resets every live connection (both ends get an RST); new ones go through as the
    /// fault in force says.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// What every connection of a proxy watches.
#[derive(Clone)]
struct Wires {
    up: watch::Receiver<Fault>,
    down: watch::Receiver<Fault>,
    cuts: watch::Receiver<u64>,
    swallowed: Arc<watch::Sender<Swallowed>>,
    held: Arc<watch::Sender<Swallowed>>,
}

async fn accept(listener: TcpListener, upstream: SocketAddr, wires: Wires) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if *wires.up.borrow() == Fault::Refuse {
            reset(client);
            continue;
        }
        let mut wires = wires.clone();
        wires.cuts.mark_unchanged();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                reset(client);
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let taken = (wires.swallowed.clone(), wires.held.clone());
            let up = pump(cr, sw, wires.up.clone(), taken.clone());
            let down = pump(sr, cw, wires.down.clone(), taken);
            // A cut drops both pumps, and with them the sockets, which `pump` set to
            // linger 0: both ends get an RST.
            tokio::select! {
                _ = async { tokio::join!(up, down) } => {}
                _ = wires.cuts.changed() => {}
            }
        });
    }
}

/// Copies `from` to `to` as the fault says, until either end closes; `taken` records
/// what the black hole swallowed and what a hold took.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    (swallowed, held): (Arc<watch::Sender<Swallowed>>, Arc<watch::Sender<Swallowed>>),
) -> std::io::Result<()> {
    linger_zero(from.as_ref());
    let mut buf = vec![0u8; 64 * 1024];
    // What a hold keeps, passed on (first) once the fault changes.
    let mut kept: Vec<u8> = Vec::new();
    loop {
        let n = tokio::select! {
            n = from.read(&mut buf) => n?,
            _ = fault.changed(), if !kept.is_empty() => {
                let now = *fault.borrow_and_update();
                match now {
                    Fault::Hold => {}
                    Fault::BlackHole => kept.clear(),
                    Fault::Refuse => return Ok(()),
                    Fault::Pass | Fault::Delay(_) => to.write_all(&std::mem::take(&mut kept)).await?,
                }
                continue;
            }
        };
        if n == 0 {
            to.write_all(&std::mem::take(&mut kept)).await?;
            to.shutdown().await?;
            return Ok(());
        }
        let current = *fault.borrow_and_update();
        match current {
            Fault::Hold => {}
            Fault::Pass | Fault::Delay(_) if !kept.is_empty() => {
                to.write_all(&std::mem::take(&mut kept)).await?;
            }
            _ => kept.clear(),
        }
        match current {
            Fault::Hold => {
                kept.extend_from_slice(&buf[..n]);
                held.send_modify(|s| s.add(&buf[..n]));
            }
            Fault::Pass => to.write_all(&buf[..n]).await?,
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                to.write_all(&buf[..n]).await?;
            }
            Fault::BlackHole => swallowed.send_modify(|s| s.add(&buf[..n])),
            Fault::Refuse => return Ok(()),
        }
    }
}

/// Closes `stream` with an RST (linger 0), as a peer that crashed.
fn reset(stream: TcpStream) {
    linger_zero(&stream);
    drop(stream);
}

/// Makes closing `stream` send an RST. A zero linger never blocks the closing thread
/// (only a positive one does, which is why tokio deprecates the setter).
#[allow(deprecated)]
fn linger_zero(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, what: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(what).await?;
        let mut got = vec![0u8; what.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn passes_swallows_resets_and_refuses() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"ping").await.unwrap(), b"ping");

        proxy.set(Fault::BlackHole);
        s.write_all(b"lost").await.unwrap();
        proxy.swallowed(4).await;
        proxy.set(Fault::Pass);
        // What the black hole took is gone; what follows goes through.
        assert_eq!(roundtrip(&mut s, b"next").await.unwrap(), b"next");

        // Held, then passed on in order once the hold ends, before what follows.
        proxy.set_up(Fault::Hold);
        s.write_all(b"held").await.unwrap();
        proxy.until_held(b"held").await;
        proxy.set_up(Fault::Pass);
        assert_eq!(roundtrip(&mut s, b"then").await.unwrap(), b"held");
        let mut rest = [0u8; 4];
        s.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"then");

        // Only the answers swallowed: the server got the request.
        proxy.set_down(Fault::BlackHole);
        s.write_all(b"half").await.unwrap();
        proxy.until_swallowed(b"half").await;
        proxy.set_down(Fault::Pass);
        assert_eq!(roundtrip(&mut s, b"more").await.unwrap(), b"more");

        proxy.cut();
        let mut buf = [0u8; 4];
        let after_cut = s.read(&mut buf).await;
        assert!(
            matches!(after_cut, Ok(0) | Err(_)),
            "a cut connection is closed: {after_cut:?}"
        );

        proxy.set(Fault::Refuse);
        let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
        let read = refused.read(&mut buf).await;
        assert!(matches!(read, Ok(0) | Err(_)), "refused: {read:?}");

        proxy.set(Fault::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut again, b"back").await.unwrap(), b"back");
    }
}
