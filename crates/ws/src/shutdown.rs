//! Ctrl-C for servers: every open connection is closed with 1001 ("going away"), and the process
//! waits for those closing handshakes (bounded) before it exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Handed to every connection handler.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    requested: watch::Receiver<bool>,
    active: Arc<AtomicUsize>,
}

/// Held by a handler while its connection is open.
#[derive(Debug)]
pub(crate) struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Held by the server's main task.
#[derive(Debug)]
pub(crate) struct Trigger {
    requested: watch::Sender<bool>,
    active: Arc<AtomicUsize>,
}

pub(crate) fn channel() -> (Shutdown, Trigger) {
    let (tx, rx) = watch::channel(false);
    let active = Arc::new(AtomicUsize::new(0));
    (
        Shutdown {
            requested: rx,
            active: active.clone(),
        },
        Trigger {
            requested: tx,
            active,
        },
    )
}

impl Shutdown {
    /// Counts this connection as open until the guard drops.
    pub(crate) fn enter(&self) -> Active {
        self.active.fetch_add(1, Ordering::Relaxed);
        Active(self.active.clone())
    }

    /// Whether Ctrl-C was pressed (cheap enough for a hot loop).
    pub(crate) fn is_requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// Resolves once Ctrl-C was pressed.
    pub(crate) async fn requested(&mut self) {
        let _ = self.requested.wait_for(|requested| *requested).await;
    }
}

impl Trigger {
    /// Asks every handler to close, then waits until they have (at most `limit`).
    pub(crate) async fn shut_down(self, limit: Duration) {
        let _ = self.requested.send(true);
        let deadline = Instant::now() + limit;
        while self.active.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Runs a server future until it fails or Ctrl-C; on Ctrl-C, closes every connection first.
pub(crate) async fn serve_until_ctrl_c(
    serving: impl Future<Output = std::io::Result<()>>,
    trigger: Trigger,
) -> Result<(), crate::Failure> {
    tokio::select! {
        result = serving => result.map_err(crate::Failure::from),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted: closing every connection with 1001");
            // A close frame waits behind data already queued to a client; allow a slow reader
            // some time to reach it (and the reply one close timeout) before giving up.
            trigger.shut_down(Duration::from_secs(3)).await;
            Ok(())
        }
    }
}
