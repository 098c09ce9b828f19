//! Stand-in when the `deflate` feature is off: a type with no values, so the connection's
//! compression paths compile away.

use crate::error::ProtocolViolation;

/// permessage-deflate is not compiled in (feature `deflate`).
#[derive(Debug)]
pub enum PerMessageDeflate {}

impl PerMessageDeflate {
    pub(crate) fn should_compress(&self, _len: usize) -> bool {
        match *self {}
    }

    pub(crate) fn compress(&mut self, _input: &[u8]) -> Result<Vec<u8>, String> {
        match *self {}
    }

    pub(crate) fn compress_fragment(&mut self, _input: &[u8], _fin: bool) -> Result<Vec<u8>, String> {
        match *self {}
    }

    pub(crate) fn abandon_message(&mut self) {
        match *self {}
    }

    pub(crate) fn reuse_deflated(&mut self, _deflated: Vec<u8>) {
        match *self {}
    }

    pub(crate) fn release_idle(&mut self) {
        match *self {}
    }

    pub(crate) fn linger(&self) -> Option<std::time::Duration> {
        match *self {}
    }

    pub(crate) fn start_waiting(&mut self) {
        match *self {}
    }

    pub(crate) fn note_input(&mut self) {
        match *self {}
    }

    pub(crate) fn release_all(&mut self) {
        match *self {}
    }

    pub(crate) fn shared_key(&self) -> Option<(u32, u8)> {
        match *self {}
    }

    pub(crate) fn inflate_message(
        &mut self,
        _input: &[u8],
        _first: bool,
        _last: bool,
        _limit: usize,
    ) -> Result<Option<bytes::Bytes>, ProtocolViolation> {
        match *self {}
    }

    pub(crate) fn inflated_so_far(&self) -> &[u8] {
        match *self {}
    }

    pub(crate) fn take_inflated_so_far(&mut self) -> Vec<u8> {
        match *self {}
    }

    pub(crate) fn abandon_receive(&mut self) {
        match *self {}
    }

    pub(crate) fn inflate_some(
        &mut self,
        _input: &[u8],
        _out: &mut Vec<u8>,
        _so_far: usize,
        _limit: usize,
    ) -> Result<usize, ProtocolViolation> {
        match *self {}
    }

    pub(crate) fn inflate_finish(
        &mut self,
        _out: &mut Vec<u8>,
        _so_far: usize,
        _limit: usize,
    ) -> Result<bool, ProtocolViolation> {
        match *self {}
    }
}
