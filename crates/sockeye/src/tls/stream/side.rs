//! [`TlsSide`]: the client and the server side of a rustls unbuffered connection, as the stream
//! drives them (sealed: these two only).

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{AppDataRecord, ReadEarlyData, UnbufferedConnectionCommon, UnbufferedStatus};

use super::sni;

mod sealed {
    pub trait Sealed {}
    impl Sealed for rustls::client::UnbufferedClientConnection {}
    impl Sealed for rustls::server::UnbufferedServerConnection {}
}

/// The two sides of a rustls unbuffered connection (sealed).
pub trait TlsSide:
    sealed::Sealed + Unpin + std::ops::Deref<Target = UnbufferedConnectionCommon<Self::Data>>
{
    #[doc(hidden)]
    type Data;
    #[doc(hidden)]
    const IS_CLIENT: bool;
    #[doc(hidden)]
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// Moves 0-RTT data to `plain`; returns the bytes to discard.
    #[doc(hidden)]
    fn early_data(records: ReadEarlyData<'_, '_, Self::Data>, plain: &mut Vec<u8>) -> usize;
    /// Server side, during the handshake: the SNI host name seen by the last `process`.
    #[doc(hidden)]
    fn take_sni() -> Option<Box<str>> {
        None
    }
}

impl TlsSide for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    const IS_CLIENT: bool = true;
    #[inline]
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
    fn early_data(_: ReadEarlyData<'_, '_, ClientConnectionData>, _: &mut Vec<u8>) -> usize {
        0 // a server's state only
    }
}

impl TlsSide for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    const IS_CLIENT: bool = false;
    #[inline]
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
    fn take_sni() -> Option<Box<str>> {
        sni::take()
    }
    /// 0-RTT data, only when the config allows it (`max_early_data_size`): application data
    /// like any other.
    fn early_data(mut records: ReadEarlyData<'_, '_, ServerConnectionData>, plain: &mut Vec<u8>) -> usize {
        let mut discard = 0;
        while let Some(Ok(AppDataRecord {
            discard: more,
            payload,
        })) = records.next_record()
        {
            discard += more;
            plain.extend_from_slice(payload);
        }
        discard
    }
}
