//! What every test file of the loop shares: the runtimes this machine allows, and a tokio
//! runtime for the clients.

use sockeye_loop::{Handler, Message, Runtime, Server, Socket};

/// epoll, and io_uring where this machine allows it (the test output names a refusal).
pub(crate) fn runtimes() -> Vec<Runtime> {
    let mut all = vec![Runtime::Epoll];
    match Server::new(sockeye::Config::default())
        .runtime(Runtime::Uring)
        .listen("127.0.0.1:0", || Probe)
    {
        Ok(server) => {
            server.shutdown().expect("the probe server stops");
            all.push(Runtime::Uring);
        }
        Err(e) => eprintln!("io_uring refused here, epoll only: {e}"),
    }
    all
}

/// The probe's handler: it serves no one.
struct Probe;

impl Handler for Probe {
    type Data = ();
    fn message(&mut self, _: &mut Socket<'_, ()>, _: Message) {}
}

/// A current-thread tokio runtime for the clients.
pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
