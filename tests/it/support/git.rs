//! Real git servers on loopback for the write-back tests: bare repositories reached over
//! file://, `git http-backend` behind lighttpd with Basic auth, and `sshd` with generated keys.
//! Everything lives in a fresh temp dir and dies with the value that started it.
//!
//! No server picks a port that another test could take first: the test binds the listener
//! (port 0) and hands it over. lighttpd takes it by systemd socket activation (`LISTEN_FDS`);
//! sshd never listens at all, the test accepts each connection and hands it to an `sshd -i`
//! (inetd mode).

use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub const HTTP_USER: &str = "bot";
/// The environment variable holding the HTTP password; set once for the whole test binary.
pub const HTTP_PASSWORD_ENV: &str = "TAGPILOT_IT_HTTP_PASSWORD";
pub const HTTP_PASSWORD: &str = "correct-horse-battery";
/// Holds a wrong password, for the failure tests.
pub const WRONG_PASSWORD_ENV: &str = "TAGPILOT_IT_WRONG_PASSWORD";
pub const WRONG_PASSWORD: &str = "wrong-horse-staple";
pub const PASSPHRASE_ENV: &str = "TAGPILOT_IT_KEY_PASSPHRASE";
pub const PASSPHRASE: &str = "open sesame";

/// Sets the secrets the tests reference by name. Environment writes race with C code reading
/// the environment, so they happen once, before any server or git operation of these tests.
#[allow(
    unsafe_code,
    reason = "`set_var` is unsafe since edition 2024; the tests have no other way to give git \
              and tagpilot secrets by environment variable"
)]
pub fn set_test_secrets() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: done once, before the git tests start threads that call into libgit2.
        unsafe {
            std::env::set_var(HTTP_PASSWORD_ENV, HTTP_PASSWORD);
            std::env::set_var(WRONG_PASSWORD_ENV, WRONG_PASSWORD);
            std::env::set_var(PASSPHRASE_ENV, PASSPHRASE);
        }
    });
}

/// Another writer, by the bare repository's path (for closures that cannot borrow a
/// [`BareRepo`]): clones, writes `content` to `file`, commits and pushes to `branch`.
pub fn push_change_at(bare: &Path, branch: &str, file: &str, content: &str, message: &str) {
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &["clone", "-q", "-b", branch, bare.to_str().unwrap(), "w"],
    );
    let w = work.path().join("w");
    let path = w.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    git(&w, &["add", "."]);
    git(&w, &["commit", "-q", "-m", message]);
    git(&w, &["push", "-q", "origin", branch]);
}

/// Runs `git` with no user or system config, failing the test on a non-zero exit.
/// The text of `path` in the tree a writer hands its planner.
pub fn read_text(files: &tagpilot::git::CommitFiles, path: &str) -> std::io::Result<String> {
    use tagpilot::files::Files as _;
    let bytes = files
        .read(Path::new(path))
        .map_err(|e| std::io::Error::other(format!("{path}: {e}")))?;
    String::from_utf8(bytes).map_err(std::io::Error::other)
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = git_command(dir, args).output().expect("run git");
    assert!(
        output.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("git output is UTF-8")
        .trim_end()
        .to_owned()
}

pub fn git_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Other Writer")
        .env("GIT_AUTHOR_EMAIL", "other@example.org")
        .env("GIT_COMMITTER_NAME", "Other Writer")
        .env("GIT_COMMITTER_EMAIL", "other@example.org");
    command
}

pub const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  template:
    spec:
      containers:
        - name: api
          image: registry.example/api:1.0.0
        - name: web
          image: registry.example/web:2.0.0
";
pub const DEPLOYMENT_PATH: &str = "apps/api/deployment.yaml";
pub const API_LINE: usize = 10;
pub const WEB_LINE: usize = 12;

/// A bare repository with one commit on `main`: [`DEPLOYMENT`] and a README.
pub struct BareRepo {
    pub dir: TempDir,
}

impl BareRepo {
    pub fn new() -> BareRepo {
        let dir = tempfile::tempdir().expect("temp dir");
        let bare = dir.path().join("origin.git");
        git(
            dir.path(),
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        git(&bare, &["config", "http.receivepack", "true"]);
        let work = dir.path().join("seed");
        git(dir.path(), &["clone", "-q", bare.to_str().unwrap(), "seed"]);
        std::fs::create_dir_all(work.join("apps/api")).unwrap();
        std::fs::write(work.join(DEPLOYMENT_PATH), DEPLOYMENT).unwrap();
        std::fs::write(work.join("README.md"), "manifests\n").unwrap();
        git(&work, &["checkout", "-q", "-b", "main"]);
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "initial"]);
        git(&work, &["push", "-q", "origin", "main"]);
        BareRepo { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("origin.git")
    }

    pub fn file_url(&self) -> String {
        format!("file://{}", self.path().display())
    }

    /// Another writer: clones, writes `content` to `file`, commits and pushes to `branch`.
    pub fn push_change(&self, branch: &str, file: &str, content: &str, message: &str) {
        push_change_at(&self.path(), branch, file, content, message);
    }

    /// Another writer: clones `main`, writes `files` (path, text), and pushes one commit whose
    /// author and committer dates are `at` (soak times and "since" read them).
    pub fn commit_dated(&self, files: &[(String, String)], at: jiff::Timestamp, message: &str) {
        let work = tempfile::tempdir().unwrap();
        let bare = self.path();
        git(
            work.path(),
            &["clone", "-q", "-b", "main", bare.to_str().unwrap(), "w"],
        );
        let w = work.path().join("w");
        for (path, text) in files {
            let path = w.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        git(&w, &["add", "."]);
        let date = format!("{} +0000", at.as_second());
        let out = git_command(&w, &["commit", "-q", "-m", message])
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        git(&w, &["push", "-q", "origin", "main"]);
    }

    pub fn show(&self, rev: &str, file: &str) -> String {
        git(&self.path(), &["show", &format!("{rev}:{file}")]) + "\n"
    }

    pub fn rev(&self, rev: &str) -> Option<String> {
        let out = git_command(&self.path(), &["rev-parse", "--verify", "-q", rev])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
    }

    /// The whole message of `rev`'s commit.
    pub fn message(&self, rev: &str) -> String {
        git(&self.path(), &["log", "-1", "--format=%B", rev])
    }

    /// Commit subjects on `branch`, newest first.
    pub fn subjects(&self, branch: &str) -> Vec<String> {
        git(&self.path(), &["log", "--format=%s", branch])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    pub fn merges(&self, branch: &str) -> usize {
        git(&self.path(), &["rev-list", "--merges", "--count", branch])
            .parse()
            .unwrap()
    }

    /// Makes every push to the repository fail in a pre-receive hook, as branch protection does.
    pub fn protect(&self) {
        let hook = self.path().join("hooks/pre-receive");
        write_executable(
            &hook,
            "#!/bin/sh\necho 'main is protected: pushes need a review' >&2\nexit 1\n",
        );
    }
}

/// Writes a script through a child process. Written from this (multi-threaded) process, it could
/// fail to run with "Text file busy" (ETXTBSY): another test forking at that moment holds the
/// write descriptor until its child execs.
pub fn write_executable(path: &Path, text: &str) {
    let status = Command::new("sh")
        .args([
            "-c",
            "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
            "sh",
            text,
        ])
        .arg(path)
        .status()
        .expect("run sh");
    assert!(status.success(), "writing {}", path.display());
}

/// A listener on a port the OS picked, held from here on.
fn loopback_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

/// Waits until `log` says `ready`; fails the test, with the log, if `child` exits first.
fn wait_for_log(child: &mut Child, what: &str, log: &Path, ready: &str) {
    let deadline = Instant::now() + super::PATIENCE;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(ready) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status}: {text}");
        }
        assert!(Instant::now() < deadline, "{what} did not start: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process killed (by its own id) when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `git http-backend` as CGI under lighttpd, with Basic auth for [`HTTP_USER`].
pub struct HttpGitServer {
    _server: Server,
    _dir: TempDir,
    pub port: u16,
}

impl HttpGitServer {
    /// Serves the bare repositories under `root` at `http://127.0.0.1:PORT/git/<name>`.
    pub fn start(root: &Path) -> HttpGitServer {
        HttpGitServer::start_for(root, HTTP_USER, HTTP_PASSWORD)
    }

    /// [`HttpGitServer::start`] accepting only `user` with `password`.
    pub fn start_for(root: &Path, user: &str, password: &str) -> HttpGitServer {
        let dir = tempfile::tempdir().unwrap();
        let listener = loopback_listener();
        let port = listener.local_addr().unwrap().port();
        let users = dir.path().join("users");
        std::fs::write(&users, format!("{user}:{password}\n")).unwrap();
        let log = dir.path().join("error.log");
        let config = format!(
            r#"server.modules = ("mod_auth", "mod_authn_file", "mod_alias", "mod_setenv", "mod_cgi")
server.document-root = "{doc}"
server.bind = "127.0.0.1"
server.port = {port}
server.systemd-socket-activation = "enable"
server.errorlog = "{log}"
alias.url = ("/git" => "/usr/lib/git-core/git-http-backend")
$HTTP["url"] =~ "^/git" {{
    cgi.assign = ("" => "")
    setenv.add-environment = ("GIT_PROJECT_ROOT" => "{root}", "GIT_HTTP_EXPORT_ALL" => "", "GIT_CONFIG_NOSYSTEM" => "1")
}}
auth.backend = "plain"
auth.backend.plain.userfile = "{users}"
auth.require = ("/git" => ("method" => "basic", "realm" => "git", "require" => "valid-user"))
"#,
            doc = dir.path().display(),
            log = log.display(),
            root = root.display(),
            users = users.display(),
        );
        let config_path = dir.path().join("lighttpd.conf");
        std::fs::write(&config_path, config).unwrap();
        // Socket activation: the listener becomes descriptor 3 of a process whose pid
        // `LISTEN_PID` names. It goes in as stdin; the shell moves it to 3 and names its own
        // pid, which `exec` hands on to lighttpd.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(
                "exec 3<&0 </dev/null; export LISTEN_PID=$$ LISTEN_FDS=1; \
                 exec lighttpd -D -f \"$0\"",
            )
            .arg(&config_path)
            .stdin(Stdio::from(OwnedFd::from(listener)))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
            .spawn()
            .expect("start lighttpd");
        wait_for_log(&mut child, "lighttpd", &log, "server started");
        HttpGitServer {
            _server: Server(child),
            _dir: dir,
            port,
        }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("http://127.0.0.1:{}/git/{repo}", self.port)
    }
}

/// An OpenSSH key pair generated with `ssh-keygen`.
pub struct SshKey {
    pub private: PathBuf,
    pub public: String,
}

pub fn ssh_keygen(dir: &Path, name: &str, passphrase: &str) -> SshKey {
    let private = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-C", name, "-N", passphrase, "-f"])
        .arg(&private)
        .status()
        .expect("run ssh-keygen");
    assert!(status.success());
    let public = std::fs::read_to_string(private.with_extension("pub"))
        .unwrap()
        .trim()
        .to_owned();
    SshKey { private, public }
}

/// `sshd` as the current user, one `sshd -i` (inetd mode) per connection to a listener the
/// test holds, accepting one generated user key.
pub struct SshGitServer {
    _server: InetdServer,
    pub dir: TempDir,
    pub port: u16,
    pub host_key: SshKey,
    pub user_key: SshKey,
    pub user: String,
}

impl SshGitServer {
    pub fn start() -> SshGitServer {
        let dir = tempfile::tempdir().unwrap();
        let host_key = ssh_keygen(dir.path(), "host_ed25519", "");
        let user_key = ssh_keygen(dir.path(), "user_ed25519", "");
        std::fs::write(
            dir.path().join("authorized_keys"),
            format!("{}\n", user_key.public),
        )
        .unwrap();
        // sshd insists on its privilege separation directory even when it cannot use it.
        let _ = std::fs::create_dir_all("/run/sshd");
        let config = format!(
            "HostKey {hk}\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\nLogLevel ERROR\n",
            hk = host_key.private.display(),
            d = dir.path().display(),
        );
        let config_path = dir.path().join("sshd_config");
        std::fs::write(&config_path, config).unwrap();
        // A configuration sshd refuses fails here, not as a connection closed mid-test.
        let check = Command::new("/usr/sbin/sshd")
            .args(["-t", "-f"])
            .arg(&config_path)
            .output()
            .expect("run sshd -t");
        assert!(
            check.status.success(),
            "sshd -t: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let mut sshd = Command::new("/usr/sbin/sshd");
        sshd.args(["-i", "-e", "-f"]).arg(&config_path);
        let server = InetdServer::start(sshd, dir.path().join("sshd.log"));
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_owned();
        SshGitServer {
            port: server.port,
            _server: server,
            dir,
            host_key,
            user_key,
            user,
        }
    }

    pub fn url(&self, repo: &Path) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.display()
        )
    }

    /// A `known_hosts` file listing this server's real host key.
    pub fn known_hosts(&self) -> PathBuf {
        let path = self.dir.path().join("known_hosts");
        std::fs::write(
            &path,
            format!("[127.0.0.1]:{} {}\n", self.port, self.host_key.public),
        )
        .unwrap();
        path
    }
}

/// Accepts connections on a listener it holds and runs `command` for each, the connection as
/// its stdin and stdout, as inetd does; stops accepting and kills what still runs when
/// dropped.
struct InetdServer {
    port: u16,
    stop: Arc<AtomicBool>,
    children: Arc<Mutex<Vec<Child>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl InetdServer {
    /// Starts accepting; each child's stderr goes to `log`.
    fn start(command: Command, log: PathBuf) -> InetdServer {
        let listener = loopback_listener();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let children: Arc<Mutex<Vec<Child>>> = Arc::default();
        let acceptor = std::thread::spawn({
            let stop = stop.clone();
            let children = children.clone();
            move || InetdServer::accept(listener, command, &log, &stop, &children)
        });
        InetdServer {
            port,
            stop,
            children,
            acceptor: Some(acceptor),
        }
    }

    fn accept(
        listener: TcpListener,
        mut command: Command,
        log: &Path,
        stop: &AtomicBool,
        children: &Mutex<Vec<Child>>,
    ) {
        for stream in listener.incoming() {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { continue };
            let stderr = std::fs::File::options()
                .create(true)
                .append(true)
                .open(log)
                .unwrap();
            let child = command
                .stdin(Stdio::from(OwnedFd::from(stream.try_clone().unwrap())))
                .stdout(Stdio::from(OwnedFd::from(stream)))
                .stderr(stderr)
                .spawn()
                .expect("start the inetd child");
            let mut children = children.lock().unwrap();
            // Reaps the ones that are done, so that they do not linger as zombies.
            children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
            children.push(child);
        }
    }
}

impl Drop for InetdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let mut children = self.children.lock().unwrap_or_else(|e| e.into_inner());
        for child in children.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `ssh-agent` listening on a socket of its own, killed when dropped. The tests that use it run
/// in a child process started with `SSH_AUTH_SOCK` pointing here, never by setting the variable
/// in the test binary, where other tests' threads read the environment.
pub struct SshAgent {
    _server: Server,
    _dir: TempDir,
    pub socket: PathBuf,
}

impl SshAgent {
    pub fn start() -> SshAgent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let log = dir.path().join("ssh-agent.log");
        let mut child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start ssh-agent");
        let deadline = Instant::now() + super::PATIENCE;
        while !socket.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "ssh-agent exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "ssh-agent did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        SshAgent {
            _server: Server(child),
            _dir: dir,
            socket,
        }
    }

    /// `ssh-add`s the private key `key`.
    pub fn add(&self, key: &Path) {
        let output = Command::new("ssh-add")
            .arg(key)
            .env("SSH_AUTH_SOCK", &self.socket)
            .stdin(Stdio::null())
            .output()
            .expect("run ssh-add");
        assert!(
            output.status.success(),
            "ssh-add {}: {}",
            key.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
