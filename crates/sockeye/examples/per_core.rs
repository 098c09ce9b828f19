//! An echo server on every core, thread per core: each thread runs its own current-thread
//! runtime, its own listener on the same port (`SO_REUSEPORT`: Linux hands each new connection
//! to one of the listeners by a hash of its addresses) and its own `Server`, so no task, waker or
//! buffer ever crosses a core. Ctrl-C closes every connection with 1001.
//!
//! `#[tokio::main]` (tokio's work-stealing runtime, one listener) is the other way to use every
//! core; bench/README.md ("Every core") measures both and says when to choose which.
//!
//! ```sh
//! cargo run --release --example per_core -- 127.0.0.1:8008 4   # address, threads (default: one per core)
//! ```

use std::io::{Error, ErrorKind};
use std::net::SocketAddr;
use std::sync::mpsc;

use futures_util::StreamExt;
use sockeye::{Config, Server, ShutdownHandle};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8008".into())
        .parse()
        .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the address: {e}")))?;
    let threads = match args.next() {
        Some(n) => n
            .parse()
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("the thread count: {e}")))?,
        None => std::thread::available_parallelism()?.get(),
    };
    // Each thread sends its server's shutdown handle once it listens.
    let (listening, handles) = mpsc::channel();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let listening = listening.clone();
            std::thread::spawn(move || serve_on_this_thread(addr, listening))
        })
        .collect();
    drop(listening);
    let handles: Vec<ShutdownHandle> = handles.iter().collect();
    if handles.len() == threads {
        println!("echo server on ws://{addr}/, {threads} threads");
        let signals = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        signals.block_on(tokio::signal::ctrl_c())?;
    }
    // Ctrl-C, or a thread could not listen (its error is returned below): stop them all.
    for handle in &handles {
        handle.shutdown();
    }
    for worker in workers {
        worker
            .join()
            .map_err(|_| Error::other("a server thread panicked"))??;
    }
    Ok(())
}

fn serve_on_this_thread(addr: SocketAddr, listening: mpsc::Sender<ShutdownHandle>) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        // Every thread's listener on the one port; the kernel spreads new connections.
        socket.set_reuseport(true)?;
        socket.bind(addr)?;
        let server = Server::from_listener(socket.listen(1024)?, Config::default());
        let _ = listening.send(server.shutdown_handle());
        drop(listening);
        server
            .serve(|mut ws, _peer| async move {
                while let Some(Ok(message)) = ws.next().await {
                    if message.is_data() && ws.feed(message).await.is_err() {
                        break;
                    }
                }
            })
            .await
    })
}
