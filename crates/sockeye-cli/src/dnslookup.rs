//! `ws dnslookup`: resolve a host name with the system resolver (getaddrinfo, so /etc/hosts
//! and nsswitch apply).

use clap::Args;

use crate::failure::Failure;
use crate::interrupt::unless_interrupted;
use crate::output::outln;

/// `dnslookup`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws dnslookup localhost
  ws dnslookup example.com

Exit codes: 0 ok, 1 the name does not resolve, 2 usage, 130 interrupted.")]
pub struct DnslookupArgs {
    /// The host name (or address) to resolve.
    pub host: String,
}

/// Prints every address of the host, one per line, in the resolver's order.
pub(crate) async fn run(args: DnslookupArgs) -> Result<(), Failure> {
    let host = args.host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(Failure::usage("give a host name: ws dnslookup HOST"));
    }
    let addresses = unless_interrupted(tokio::net::lookup_host((host, 0)))
        .await?
        .map_err(|e| Failure::new(format!("cannot resolve {host}: {e}")))?;
    let mut seen = Vec::new();
    for address in addresses {
        let ip = address.ip();
        if !seen.contains(&ip) {
            seen.push(ip);
            outln!("{ip}")?;
        }
    }
    if seen.is_empty() {
        return Err(Failure::new(format!("cannot resolve {host}: no address")));
    }
    Ok(())
}
