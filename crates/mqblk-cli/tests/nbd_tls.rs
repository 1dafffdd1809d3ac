//! `mqblk serve` with TLS against real clients: libnbd's nbdinfo and
//! nbdcopy (nbds:// URIs with tls-psk-file or tls-certificates) and qemu
//! (tls-creds-psk and tls-creds-x509 objects; TLS 1.3, and qemu's GnuTLS
//! held to TLS 1.2 with a PSK suite), over TCP and a Unix socket; and the
//! refusals: a wrong key, an unknown identity, a clear
//! client where TLS is required (the NBD_REP_ERR_TLS_REQD answer seen on
//! a raw socket), a missing client certificate under --tls-verify-peer.
//! Credentials are made per run by psktool and certtool (gnutls-bin;
//! scripts/test-all.sh installs it).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;
use common::nbd::run;

const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;

/// `mqblk serve ARGS` on TCP 127.0.0.1 (a port the kernel picks) or on a
/// Unix socket; its stderr kept for the assertions. Killed when dropped.
struct TlsServer {
    child: Child,
    /// host:port, or the socket's path.
    address: String,
    log: Arc<Mutex<String>>,
}

impl TlsServer {
    fn start(args: &[&str], unix: Option<&Path>) -> Self {
        let mut all = vec!["serve".to_string(), "--device".into(), "null:size=16,memory_backed=1".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        match unix {
            Some(p) => all.extend(["--unix".into(), p.to_str().unwrap().into()]),
            None => all.extend(["--listen".into(), "127.0.0.1:0".into()]),
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk")).args(&all).stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        // "mqblk serve: 1 export(s) on ADDRESS (TLS required), ready"
        let address = loop {
            let line = lines.next().expect("serve said it is ready").unwrap();
            if let Some(rest) = line.split(" on ").nth(1).filter(|_| line.ends_with("ready")) {
                break rest.split([' ', ',']).next().unwrap().to_string();
            }
        };
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Self { child, address, log }
    }

    fn port(&self) -> &str {
        self.address.rsplit(':').next().unwrap()
    }

    /// The server's messages so far (after a short wait for the last).
    fn log(&self) -> String {
        std::thread::sleep(Duration::from_millis(200));
        self.log.lock().unwrap().clone()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A folder with a PSK for alice (keys.psk, the name qemu looks for),
/// and a CA, a server certificate for 127.0.0.1 and localhost, and a
/// client certificate, under the names nbdkit, libnbd and qemu use.
fn credentials(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mqblk-nbd-tls-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let at = |name: &str| dir.join(name).to_str().unwrap().to_string();
    run("psktool", &["-u", "alice", "-p", &at("keys.psk")]);
    let templates = [
        ("ca.info", "cn = mqblk test CA\nca\ncert_signing_key\nexpiration_days = 2\n"),
        (
            "server.info",
            "organization = mqblk\ncn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\n\
             encryption_key\nsigning_key\nexpiration_days = 2\n",
        ),
        (
            "client.info",
            "organization = mqblk\ncn = client\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 2\n",
        ),
    ];
    for (name, text) in templates {
        std::fs::write(dir.join(name), text).unwrap();
    }
    for key in ["ca-key.pem", "server-key.pem", "client-key.pem"] {
        run("certtool", &["--generate-privkey", "--key-type=ecdsa", "--outfile", &at(key)]);
    }
    run(
        "certtool",
        &[
            "--generate-self-signed",
            "--load-privkey",
            &at("ca-key.pem"),
            "--template",
            &at("ca.info"),
            "--outfile",
            &at("ca-cert.pem"),
        ],
    );
    for who in ["server", "client"] {
        run(
            "certtool",
            &[
                "--generate-certificate",
                "--load-ca-certificate",
                &at("ca-cert.pem"),
                "--load-ca-privkey",
                &at("ca-key.pem"),
                "--load-privkey",
                &at(&format!("{who}-key.pem")),
                "--template",
                &at(&format!("{who}.info")),
                "--outfile",
                &at(&format!("{who}-cert.pem")),
            ],
        );
    }
    dir
}

/// Runs a client that must fail; its stderr.
fn run_fails(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(!out.status.success(), "{cmd} {args:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// 4 MiB of a pattern that changes with every 8 bytes.
fn pattern() -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..(4 << 20) / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

/// nbdcopy writes `pattern()` through `uri` and reads it back, byte-exact.
fn nbdcopy_round_trip(uri: &str, dir: &Path) {
    let src = dir.join("src.img");
    let data = pattern();
    std::fs::write(&src, &data).unwrap();
    run("nbdcopy", &[src.to_str().unwrap(), uri]);
    let back = dir.join("back.img");
    run("nbdcopy", &[uri, back.to_str().unwrap()]);
    let got = std::fs::read(&back).unwrap();
    assert!(got[..data.len()] == data[..], "nbdcopy through TLS, both ways, byte-exact");
}

/// qemu-io writes a pattern at 1 MiB and reads it back, then qemu-img
/// converts the export to a file whose bytes there are that pattern.
fn qemu_round_trip(object: &str, image: &str, dir: &Path) {
    let io = run(
        "qemu-io",
        &["--object", object, "--image-opts", image, "-c", "write -P 0x5a 1M 64k", "-c", "read -P 0x5a 1M 64k"],
    );
    assert!(io.contains("wrote 65536/65536") && io.contains("read 65536/65536"), "{io}");
    assert!(!io.contains("fail"), "{io}");
    let out = dir.join("qemu.img");
    run("qemu-img", &["convert", "--object", object, "--image-opts", image, "-O", "raw", out.to_str().unwrap()]);
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 16 << 20);
    assert!(got[(1 << 20)..(1 << 20) + 65536].iter().all(|&b| b == 0x5a), "qemu-img read qemu-io's write");
}

#[test]
fn psk_over_tcp_serves_nbdinfo_nbdcopy_and_qemu() {
    let dir = credentials("psk-tcp");
    let psk = dir.join("keys.psk");
    let s = TlsServer::start(&["--tls=require", &format!("--tls-psk={}", psk.display())], None);
    let uri = format!("nbds://alice@127.0.0.1:{}/?tls-psk-file={}", s.port(), psk.display());
    let info = run("nbdinfo", &[&uri]);
    assert!(info.contains("with TLS") && info.contains("export-size: 16777216"), "{info}");
    nbdcopy_round_trip(&uri, &dir);
    let object = format!("tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice", dir.display());
    let image = format!("driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={},tls-creds=tls0", s.port());
    qemu_round_trip(&object, &image, &dir);
    // GnuTLS held to TLS 1.2: a PSK cipher suite instead of TLS 1.3's
    // external PSK.
    let tls12 = format!("{object},priority=NORMAL:-VERS-TLS1.3:+ECDHE-PSK:+PSK");
    let info = run("qemu-img", &["info", "--object", &tls12, "--image-opts", &image]);
    assert!(info.contains("16777216 bytes"), "{info}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn psk_over_a_unix_socket_serves_nbdinfo_nbdcopy_and_qemu() {
    let dir = credentials("psk-unix");
    let (psk, sock) = (dir.join("keys.psk"), dir.join("sock"));
    let _s = TlsServer::start(&["--tls=require", &format!("--tls-psk={}", psk.display())], Some(&sock));
    let uri = format!("nbds+unix://alice@/?socket={}&tls-psk-file={}", sock.display(), psk.display());
    assert_eq!(run("nbdinfo", &["--size", &uri]).trim(), "16777216");
    nbdcopy_round_trip(&uri, &dir);
    let object = format!("tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice", dir.display());
    let image = format!("driver=nbd,server.type=unix,server.path={},tls-creds=tls0", sock.display());
    qemu_round_trip(&object, &image, &dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn x509_serves_nbdinfo_nbdcopy_and_qemu_and_verify_peer_wants_a_client_certificate() {
    let dir = credentials("x509");
    let certs = format!("--tls-certificates={}", dir.display());
    let s = TlsServer::start(&["--tls=require", &certs], None);
    let uri = format!("nbds://127.0.0.1:{}/?tls-certificates={}", s.port(), dir.display());
    assert!(run("nbdinfo", &[&uri]).contains("with TLS"));
    nbdcopy_round_trip(&uri, &dir);
    let object = format!("tls-creds-x509,id=tls0,endpoint=client,dir={}", dir.display());
    let image = format!("driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={},tls-creds=tls0", s.port());
    qemu_round_trip(&object, &image, &dir);
    drop(s);

    let s = TlsServer::start(&["--tls=require", &certs, "--tls-verify-peer"], None);
    let uri = format!("nbds://127.0.0.1:{}/?tls-certificates={}", s.port(), dir.display());
    assert_eq!(run("nbdinfo", &["--size", &uri]).trim(), "16777216", "a client with a certificate the CA signed");
    let ca_only = dir.join("ca-only");
    std::fs::create_dir_all(&ca_only).unwrap();
    std::fs::copy(dir.join("ca-cert.pem"), ca_only.join("ca-cert.pem")).unwrap();
    let uri = format!("nbds://127.0.0.1:{}/?tls-certificates={}", s.port(), ca_only.display());
    let err = run_fails("nbdinfo", &["--size", &uri]);
    assert!(err.contains("TLS") || err.contains("gnutls"), "{err}");
    let log = s.log();
    assert!(log.contains("TLS handshake") && log.contains("peer did not return a certificate"), "{log}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn wrong_keys_unknown_identities_and_clear_clients_are_refused() {
    let dir = credentials("refusals");
    let psk = dir.join("keys.psk");
    let s = TlsServer::start(&["--tls=require", &format!("--tls-psk={}", psk.display())], None);
    let uri =
        |user: &str, file: &Path| format!("nbds://{user}@127.0.0.1:{}/?tls-psk-file={}", s.port(), file.display());
    let wrong = dir.join("wrong.psk");
    std::fs::write(&wrong, format!("alice:{}\n", "ab".repeat(32))).unwrap();
    let err = run_fails("nbdinfo", &["--size", &uri("alice", &wrong)]);
    assert!(err.contains("TLS") || err.contains("gnutls"), "a wrong key: {err}");
    let bob = dir.join("bob.psk");
    run("psktool", &["-u", "bob", "-p", bob.to_str().unwrap()]);
    let err = run_fails("nbdinfo", &["--size", &uri("bob", &bob)]);
    assert!(err.contains("TLS") || err.contains("gnutls"), "an unknown identity: {err}");
    assert!(s.log().contains("unknown PSK identity 'bob'"), "{}", s.log());
    let err = run_fails("nbdinfo", &["--size", &format!("nbd://127.0.0.1:{}/", s.port())]);
    // libnbd names NBD_REP_ERR_TLS_REQD (to the first option it sends).
    assert!(err.contains("server requires TLS encryption first"), "a clear client: {err}");
    assert_eq!(run("nbdinfo", &["--size", &uri("alice", &psk)]).trim(), "16777216", "the right key still works");

    // A raw clear client: GO is answered NBD_REP_ERR_TLS_REQD, and
    // EXPORT_NAME (no error reply exists) closes the connection.
    let mut c = std::net::TcpStream::connect(&s.address).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut greeting = [0u8; 18];
    c.read_exact(&mut greeting).unwrap();
    c.write_all(&3u32.to_be_bytes()).unwrap();
    let option = |opt: u32, data: &[u8]| {
        let mut o = b"IHAVEOPT".to_vec();
        o.extend_from_slice(&opt.to_be_bytes());
        o.extend_from_slice(&(data.len() as u32).to_be_bytes());
        o.extend_from_slice(data);
        o
    };
    c.write_all(&option(7, &[0; 6])).unwrap(); // NBD_OPT_GO, the default export
    let mut h = [0u8; 20];
    c.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[8..12].try_into().unwrap()), 7);
    assert_eq!(u32::from_be_bytes(h[12..16].try_into().unwrap()), REP_ERR_TLS_REQD);
    let mut message = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
    c.read_exact(&mut message).unwrap();
    c.write_all(&option(1, b"")).unwrap(); // NBD_OPT_EXPORT_NAME
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no export size or flags in clear: {rest:?}");
    assert!(s.log().contains("TLS is required"), "{}", s.log());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tls_on_serves_clear_and_tls_clients_alike() {
    let dir = credentials("on");
    let psk = dir.join("keys.psk");
    let s = TlsServer::start(&["--tls=on", &format!("--tls-psk={}", psk.display())], None);
    let clear = run("nbdinfo", &[&format!("nbd://127.0.0.1:{}/", s.port())]);
    assert!(clear.contains("without TLS"), "{clear}");
    let tls = run("nbdinfo", &[&format!("nbds://alice@127.0.0.1:{}/?tls-psk-file={}", s.port(), psk.display())]);
    assert!(tls.contains("with TLS"), "{tls}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_tls_options_say_what_is_wrong() {
    let dir = std::env::temp_dir().join(format!("mqblk-nbd-tls-options-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let serve = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "--device", "null:size=1", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(serve(&["--tls=require"]).contains("--tls=require needs --tls-psk=FILE or --tls-certificates=DIR"));
    let bad = dir.join("bad.psk");
    std::fs::write(&bad, "alice:00ff\nbob:xyz\n").unwrap();
    let err = serve(&["--tls=require", &format!("--tls-psk={}", bad.display())]);
    assert!(err.contains("bad.psk") && err.contains("line 2 (user 'bob')"), "{err}");
    let err = serve(&["--tls=on", &format!("--tls-psk={}", dir.join("absent.psk").display())]);
    assert!(err.contains("absent.psk") && err.contains("No such file"), "{err}");
    let err = serve(&["--tls=on", &format!("--tls-certificates={}", dir.display())]);
    assert!(err.contains("ca-cert.pem"), "{err}");
    assert!(serve(&["--tls-psk=x"]).contains("--tls-psk needs --tls=on or --tls=require"));
    std::fs::remove_dir_all(dir).unwrap();
}
