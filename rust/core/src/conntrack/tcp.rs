//! The TCP state machine: a simplified `nf_conntrack_proto_tcp` (states and transitions by
//! flags and direction; no sequence-window tracking).

use super::key::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

/// TCP connection state, as Linux conntrack names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TcpState {
    /// SYN seen from the opener.
    SynSent = 0,
    /// SYN-ACK seen from the responder (or a simultaneous open).
    SynRecv = 1,
    /// Handshake completed (or picked up mid-stream).
    Established = 2,
    /// One side sent FIN.
    FinWait = 3,
    /// The FIN was acknowledged; the other side may still send.
    CloseWait = 4,
    /// Both sides sent FIN; waiting for the last ACK.
    LastAck = 5,
    /// Closed cleanly; kept a while for stray retransmissions.
    TimeWait = 6,
    /// Reset.
    Close = 7,
}

/// Number of TCP states (size of the timeout table).
pub const TCP_STATES: usize = 8;

impl TcpState {
    /// Linux's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
        }
    }
}

/// What a TCP packet is, for the state machine (Linux's `get_conntrack_index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    Syn,
    SynAck,
    Fin,
    Ack,
    Rst,
    /// No SYN, FIN, RST nor ACK: never valid.
    None,
}

pub(crate) fn seg(flags: u8) -> Seg {
    if flags & TCP_RST != 0 {
        Seg::Rst
    } else if flags & TCP_SYN != 0 {
        if flags & TCP_ACK != 0 {
            Seg::SynAck
        } else {
            Seg::Syn
        }
    } else if flags & TCP_FIN != 0 {
        Seg::Fin
    } else if flags & TCP_ACK != 0 {
        Seg::Ack
    } else {
        Seg::None
    }
}

/// State a packet opens a connection with, when nothing is tracked yet: SYN opens
/// `SynSent`; a plain ACK opens `Established` when loose pickup is on; anything else opens
/// nothing (as Linux: SYN-ACK, FIN, RST and flag-less segments are INVALID without a
/// connection).
pub(crate) fn open(flags: u8, loose: bool) -> Option<TcpState> {
    if flags & (TCP_SYN | TCP_FIN) == (TCP_SYN | TCP_FIN) {
        return None; // SYN+FIN: never legitimate
    }
    match seg(flags) {
        Seg::Syn => Some(TcpState::SynSent),
        Seg::Ack if loose => Some(TcpState::Established),
        _ => None,
    }
}

/// Result of one packet on a tracked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Valid: the connection moves to (or stays in) this state.
    To(TcpState),
    /// A SYN on a closed connection (TIME_WAIT/CLOSE): the old entry goes, the packet opens a
    /// new connection and is judged by policy again.
    Reopen,
    /// Does not fit the state; the state is not changed.
    Invalid,
}

/// One transition. `orig` is the packet's direction (true = from the opener); `fin_orig`
/// says which side sent the first FIN (meaningful from `FinWait` on).
pub(crate) fn step(state: TcpState, flags: u8, orig: bool, fin_orig: bool) -> Step {
    use TcpState::*;
    let s = seg(flags);
    if s == Seg::None {
        return Step::Invalid;
    }
    if s == Seg::Rst {
        return Step::To(Close);
    }
    if flags & (TCP_SYN | TCP_FIN) == (TCP_SYN | TCP_FIN) {
        return Step::Invalid;
    }
    // The side that did not send the first FIN.
    let other_side = orig != fin_orig;
    match state {
        SynSent => match (s, orig) {
            (Seg::Syn, true) => Step::To(SynSent),     // retransmitted SYN
            (Seg::Syn, false) => Step::To(SynRecv),    // simultaneous open
            (Seg::SynAck, false) => Step::To(SynRecv), // the answer
            _ => Step::Invalid,
        },
        SynRecv => match s {
            Seg::Syn if orig => Step::To(SynRecv),
            Seg::SynAck => Step::To(SynRecv),
            Seg::Ack => Step::To(Established),
            Seg::Fin => Step::To(FinWait),
            _ => Step::Invalid,
        },
        Established => match s {
            Seg::Fin => Step::To(FinWait),
            // Retransmitted handshake segments and data: no change.
            _ => Step::To(Established),
        },
        FinWait => match s {
            Seg::Fin if other_side => Step::To(LastAck),
            Seg::Ack if other_side => Step::To(CloseWait),
            _ => Step::To(FinWait),
        },
        CloseWait => match s {
            Seg::Fin if other_side => Step::To(LastAck),
            _ => Step::To(CloseWait),
        },
        LastAck => match s {
            Seg::Ack => Step::To(TimeWait),
            Seg::Syn => Step::Invalid,
            _ => Step::To(LastAck),
        },
        TimeWait => match s {
            Seg::Syn => Step::Reopen,
            _ => Step::To(TimeWait),
        },
        Close => match s {
            Seg::Syn => Step::Reopen,
            _ => Step::Invalid,
        },
    }
}
