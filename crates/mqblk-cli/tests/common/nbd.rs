//! `mqblk serve` as a child process on a Unix socket, and the client
//! tools the NBD tests run against it.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `mqblk serve` on a Unix socket in a folder of its own; killed
/// (SIGKILL) and its folder removed when dropped.
pub struct Server {
    pub child: Child,
    pub dir: PathBuf,
}

impl Server {
    /// Starts `mqblk serve ARGS --unix SOCK` and waits for the socket.
    pub fn start(name: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("mqblk-nbd-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("sock");
        let mut all: Vec<String> = vec!["serve".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        all.extend(["--unix".into(), sock.to_str().unwrap().into()]);
        let child = Command::new(env!("CARGO_BIN_EXE_mqblk")).args(&all).stderr(Stdio::piped()).spawn().unwrap();
        let t = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, dir }
    }
    pub fn sock(&self) -> String {
        self.dir.join("sock").to_str().unwrap().to_string()
    }
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock())
    }
    pub fn uri_export(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.sock())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (scripts/test-all.sh installs it)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `mqblk control`: one request to a server's control socket.
pub fn control(path: &str, words: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk")).arg("control").arg(path).args(words).output().unwrap()
}
