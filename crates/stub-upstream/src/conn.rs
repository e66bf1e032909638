//! The stub's connections. Each has a switch ([`Hold`]) a stream can throw
//! before it drops the connection: from then on what the connection writes
//! stays in the kernel (`TCP_CORK`) until the close, so the last bytes and
//! the close leave in one segment and the reader gets both in one read.
//! (Without it the reader, already waiting, may take the bytes before the
//! close arrives.)

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Accepts connections as [`StubIo`].
pub(crate) struct StubListener(pub TcpListener);

impl Listener for StubListener {
    type Io = StubIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (StubIo, SocketAddr) {
        let (tcp, addr) = Listener::accept(&mut self.0).await;
        let _ = tcp.set_nodelay(true);
        let io = StubIo {
            tcp,
            hold: Hold::default(),
            holding: false,
        };
        (io, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// The switch of one connection; handlers find it in their request's
/// `ConnectInfo`.
#[derive(Clone, Default)]
pub(crate) struct Hold(Arc<AtomicBool>);

impl Hold {
    /// Keeps what the connection writes from now on until it closes.
    pub(crate) fn until_close(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Connected<IncomingStream<'_, StubListener>> for Hold {
    fn connect_info(stream: IncomingStream<'_, StubListener>) -> Self {
        stream.io().hold.clone()
    }
}

pub(crate) struct StubIo {
    tcp: TcpStream,
    hold: Hold,
    /// The socket is corked.
    holding: bool,
}

impl StubIo {
    fn hold_if_asked(&mut self) {
        if self.holding || !self.hold.0.load(Ordering::Acquire) {
            return;
        }
        self.holding = true;
        #[cfg(target_os = "linux")]
        let _ = socket2::SockRef::from(&self.tcp).set_tcp_cork(true);
    }
}

impl AsyncRead for StubIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for StubIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.hold_if_asked();
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.hold_if_asked();
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
