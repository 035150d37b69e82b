//! Probes against `ExecRequest::exec_only` (security review). Each prints what happened.

use std::path::{Path, PathBuf};

use corral_exec::linux::LinuxBackend;
use corral_exec::{Backend, ExecOutput, ExecRequest};

use crate::shell;

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corral-sandbox-helper"))
}

fn backend() -> LinuxBackend {
    crate::with_test_pool(LinuxBackend::new(helper()))
}

async fn run(req: ExecRequest) -> ExecOutput {
    match backend().run(req).await {
        Ok(out) => out,
        Err(e) => panic!("run: {e} ({e:?})"),
    }
}

fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, path)
}

fn loader() -> &'static str {
    ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|l| Path::new(l).exists())
        .expect("loader")
}

fn show(name: &str, out: &ExecOutput) {
    eprintln!(
        "=== {name}: exit={:?}\n--- stdout:\n{}--- stderr:\n{}",
        out.exit_code,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A workdir holding an unlisted ELF (`tool`, a copy of `/usr/bin/id`): bytes the agent wrote.
fn workdir() -> (tempfile::TempDir, PathBuf) {
    let (k, d) = tempdir();
    std::fs::copy("/usr/bin/id", d.join("tool")).unwrap();
    (k, d)
}

#[tokio::test]
async fn probe_mountinfo() {
    let (_k, dir) = workdir();
    let mut req = shell("while read l; do echo \"$l\"; done < /proc/self/mountinfo");
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![PathBuf::from("/bin/sh")]);
    let out = run(req).await;
    show("mountinfo", &out);
}

#[tokio::test]
async fn probe_memfd_perl() {
    let (_k, dir) = workdir();
    let script = format!(
        r#"/usr/bin/perl -e '
$^F = 1000; my $n = "x";
my $fd = syscall(319, $n, 0); die "memfd_create: $!" if $fd < 0;
open(my $m, ">&=", $fd) or die "fdopen $!"; binmode $m;
open(my $s, "<", "{dir}/tool") or die "open $!"; binmode $s;
local $/; my $b = <$s>; print {{$m}} $b; $m->flush;
open(my $ro, "<", "/proc/self/fd/$fd") or die "reopen $!";
my $rofd = fileno($ro); close($m);
exec {{"/proc/self/fd/$rofd"}} "unlisted-id" or print STDERR "exec memfd: $!\n";
'; echo memfd-exec=$?
/usr/bin/perl -e '
$^F = 1000; my $n = "x";
my $fd = syscall(319, $n, 8); # MFD_NOEXEC_SEAL
open(my $m, ">&=", $fd) or die; binmode $m;
open(my $s, "<", "{dir}/tool") or die; binmode $s;
local $/; my $b = <$s>; print {{$m}} $b; $m->flush;
exec {{"{loader}"}} "ld.so", "/proc/self/fd/$fd" or print STDERR "exec ld.so: $!\n";
'; echo memfd-noexec-seal-via-loader=$?
"#,
        dir = dir.display(),
        loader = loader()
    );
    let mut req = shell(&script);
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![
        PathBuf::from("/bin/sh"),
        PathBuf::from("/usr/bin/perl"),
    ]);
    let out = run(req).await;
    show("memfd via perl", &out);
}

#[tokio::test]
async fn probe_memfd_python() {
    let (_k, dir) = workdir();
    let script = format!(
        r#"/usr/bin/python3 -c '
import os
fd = os.memfd_create("x", 0)
os.write(fd, open("{dir}/tool","rb").read())
ro = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY)
os.close(fd)
os.execv("/proc/self/fd/%d" % ro, ["unlisted-id"])
'; echo python=$?"#,
        dir = dir.display()
    );
    let mut req = shell(&script);
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![
        PathBuf::from("/bin/sh"),
        corral_exec::linux::find_program("python3").unwrap(),
    ]);
    let out = run(req).await;
    show("memfd via python3", &out);
}

/// Only `/bin/sh` listed: the loader (in the closure) starts `lli` from `/usr/lib/llvm-14`
/// (outside the program directories), which JIT-runs LLVM IR the agent wrote: memfd_create,
/// copy the agent's ELF in, execve it.
#[tokio::test]
async fn probe_lli_via_loader() {
    let lli = "/usr/lib/llvm-14/bin/lli";
    if !Path::new(lli).exists() {
        eprintln!("no lli here");
        return;
    }
    let (_k, dir) = workdir();
    std::fs::copy("/tmp/probe/run.ll", dir.join("run.ll")).unwrap();
    let script = format!(
        "SRC={dir}/tool {loader} {lli} {dir}/run.ll; echo lli=$?",
        dir = dir.display(),
        loader = loader()
    );
    let mut req = shell(&script);
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![PathBuf::from("/bin/sh")]);
    let out = run(req).await;
    show("lli via loader, only sh listed", &out);
}

#[tokio::test]
async fn probe_preload_and_fd_tricks() {
    let (_k, dir) = workdir();
    let (_kr, rdir) = tempdir();
    std::fs::copy("/tmp/probe/pre.so", dir.join("pre.so")).unwrap();
    std::fs::copy("/tmp/probe/pre.so", rdir.join("pre.so")).unwrap();
    std::fs::copy("/usr/bin/id", rdir.join("tool")).unwrap();
    let script = format!(
        "LD_PRELOAD={dir}/pre.so /bin/sh -c 'echo preload-w-ran'; \
         LD_PRELOAD={rdir}/pre.so /bin/sh -c 'echo preload-r-ran'; \
         {loader} --preload {dir}/pre.so /bin/sh -c 'echo ldso-preload-w'; \
         exec 3<{dir}/tool; {loader} /proc/self/fd/3; echo fd3-loader=$?; \
         /proc/self/fd/3; echo fd3-exec=$?; \
         {rdir}/tool; echo readpath-exec=$?; \
         {loader} {rdir}/tool; echo readpath-loader=$?; \
         {loader} --library-path {dir} /bin/sh -c 'echo libpath-ok'; \
         ls /usr/bin /bin /usr/sbin /usr/local/bin 2>&1 | head -50 || true",
        dir = dir.display(),
        rdir = rdir.display(),
        loader = loader()
    );
    let mut req = shell(&script);
    req.write_paths = vec![dir.clone()];
    req.read_paths = vec![rdir.clone()];
    req.exec_only = Some(vec![PathBuf::from("/bin/sh")]);
    let out = run(req).await;
    show("preload/fd/read path", &out);
}

/// `bash` (always listed for agents): `enable -f` of a shared object the agent wrote.
#[tokio::test]
async fn probe_bash_enable_f() {
    let (_k, dir) = workdir();
    std::fs::copy("/tmp/probe/pre.so", dir.join("pre.so")).unwrap();
    let script = format!(
        "enable -f {dir}/pre.so x; echo enable=$?; cp {dir}/pre.so /tmp/p.so 2>&1; \
         printf '\\177ELF' > /tmp/elf; /tmp/elf; echo tmp=$?; /dev/shm/x; echo shm=$?",
        dir = dir.display()
    );
    let mut req = corral_exec::ExecRequest {
        argv: vec!["/bin/bash".into(), "-c".into(), script],
        ..shell("")
    };
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![PathBuf::from("/bin/sh"), PathBuf::from("/bin/bash")]);
    let out = run(req).await;
    show("bash enable -f", &out);
}

/// An attached run (no copy-on-write layer) with `isolation.host_uids`: is the writable
/// idmapped bind `noexec`?
#[tokio::test]
async fn probe_attached_idmapped_write_path() {
    if !rustix::process::getuid().is_root() {
        eprintln!("needs host root");
        return;
    }
    let (_k, dir) = workdir();
    let b = std::sync::Arc::new(
        crate::with_test_pool(LinuxBackend::new(helper()))
            .with_host_ids(Some(corral_exec::linux::DEFAULT_HOST_RANGE)),
    );
    let script = format!(
        "grep -F '{dir}' /proc/self/mountinfo 2>/dev/null || while read l; do case \"$l\" in *{dir}*) echo \"$l\";; esac; done </proc/self/mountinfo; \
         {loader} {dir}/tool; echo loader-on-write-path=$?; {dir}/tool; echo exec=$?",
        dir = dir.display(),
        loader = loader()
    );
    let mut req = shell(&script);
    req.write_paths = vec![dir.clone()];
    req.exec_only = Some(vec![PathBuf::from("/bin/sh")]);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let b2 = std::sync::Arc::clone(&b);
    let run = tokio::spawn(async move { b2.run_attached(req, tx).await });
    let attached = rx.await.expect("pipes");
    use tokio::io::AsyncReadExt;
    let mut so = attached.stdout;
    drop(attached.stdin);
    let mut o = Vec::new();
    let mut e = Vec::new();
    let _ = so.read_to_end(&mut o).await;
    let out = run.await.unwrap();
    if let Ok(x) = &out {
        e = x.stderr.clone();
    }
    eprintln!(
        "=== attached idmapped: {:?}\n{}\n{}",
        out.as_ref().map(|o| o.exit_code),
        String::from_utf8_lossy(&o),
        String::from_utf8_lossy(&e)
    );
}
