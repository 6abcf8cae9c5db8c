//! `floor`: the raw cost of delivering one small frame on loopback TCP.
//!
//! One process opens N loopback connections to itself. A writer thread writes one SSE-sized
//! frame per socket in turn with plain blocking `write_all` calls; a separate thread (a
//! single-threaded tokio runtime) drains the other ends. The floor is the writer thread's CPU
//! time (`CLOCK_THREAD_CPUTIME_ID`) divided by the number of writes: the kernel cost of one
//! small send on loopback (on loopback the receive path largely runs in the sender's context,
//! as it does for a server). No server can deliver a message more cheaply per socket write, so
//! a server's CPU-µs per delivery divided by this floor says how much it spends above a bare
//! write. The whole process's CPU per write (writer + readers) is reported too.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use crate::procstat::{own_cpu_micros, thread_cpu_micros};

/// The measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FloorResult {
    /// Connections written to.
    pub conns: u64,
    /// Bytes per write.
    pub size: usize,
    /// Writes made.
    pub writes: u64,
    /// Wall time of the writing loop, seconds.
    pub seconds: f64,
    /// Writes per second.
    pub writes_per_sec: f64,
    /// Writer thread CPU-µs per write: the floor.
    pub writer_cpu_us_per_write: f64,
    /// Whole process (writer + readers) CPU-µs per write.
    pub process_cpu_us_per_write: f64,
}

/// An SSE event of about `size` bytes, as a server would write it.
pub(crate) fn frame(size: usize) -> Vec<u8> {
    let head = b"id: 1-1\ndata: {\"pad\":\"";
    let tail = b"\"}\n\n";
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut v = Vec::with_capacity(size);
    v.extend_from_slice(head);
    v.extend(std::iter::repeat_n(b'x', pad));
    v.extend_from_slice(tail);
    v
}

/// Largest connection count (two descriptors each, under a 20,000 open-file limit).
pub(crate) const MAX_CONNS: u64 = 9_000;

/// Runs the measurement.
pub(crate) fn measure(conns: u64, duration: Duration, size: usize) -> anyhow::Result<FloorResult> {
    anyhow::ensure!(
        (1..=MAX_CONNS).contains(&conns),
        "--conns must be between 1 and {MAX_CONNS}"
    );
    anyhow::ensure!(
        !duration.is_zero() && duration <= Duration::from_secs(3600),
        "--duration must be between 1ms and 1h"
    );
    anyhow::ensure!(
        (16..=65_536).contains(&size),
        "--size must be between 16 and 65536"
    );
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback listener")?;
    let addr = listener.local_addr()?;
    let mut writers = Vec::with_capacity(conns as usize);
    let mut readers = Vec::with_capacity(conns as usize);
    for _ in 0..conns {
        let c = TcpStream::connect(addr).context("loopback connect failed")?;
        let (s, _) = listener.accept().context("loopback accept failed")?;
        s.set_nodelay(true)?;
        c.set_nonblocking(true)?;
        writers.push(s);
        readers.push(c);
    }
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            for c in readers {
                let mut c = tokio::net::TcpStream::from_std(c)?;
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = c.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                });
            }
            tokio::task::spawn_blocking(move || {
                let _ = stop_rx.recv();
            })
            .await?;
            anyhow::Ok(())
        })
    });
    let data = frame(size);
    let proc0 = own_cpu_micros();
    let cpu0 = thread_cpu_micros();
    let t0 = Instant::now();
    let mut writes = 0u64;
    'outer: loop {
        for w in writers.iter_mut() {
            w.write_all(&data).context("write failed")?;
            writes += 1;
        }
        if t0.elapsed() >= duration {
            break 'outer;
        }
    }
    let cpu = thread_cpu_micros() - cpu0;
    let seconds = t0.elapsed().as_secs_f64();
    let proc_cpu = own_cpu_micros() - proc0;
    drop(writers);
    let _ = stop_tx.send(());
    let _ = reader.join();
    Ok(FloorResult {
        conns,
        size: data.len(),
        writes,
        seconds,
        writes_per_sec: writes as f64 / seconds.max(1e-9),
        writer_cpu_us_per_write: cpu as f64 / writes.max(1) as f64,
        process_cpu_us_per_write: proc_cpu as f64 / writes.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_has_requested_size_and_is_sse() {
        let f = frame(100);
        assert_eq!(f.len(), 100);
        assert!(f.starts_with(b"id: "));
        assert!(f.ends_with(b"\n\n"));
    }

    #[test]
    fn measures_a_tiny_floor() {
        let r = measure(4, Duration::from_millis(200), 100).unwrap();
        assert!(r.writes > 0);
        assert!(r.writer_cpu_us_per_write > 0.0);
        assert!(measure(0, Duration::from_millis(10), 100).is_err());
    }
}
