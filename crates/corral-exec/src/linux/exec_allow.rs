//! What a run that may execute only some programs ([`crate::ExecRequest::exec_only`]) must be
//! allowed to execute so that those programs start: the kernel opens an ELF's dynamic loader
//! (`PT_INTERP`) and a script's `#!` interpreter with execute intent, and landlock checks the
//! execute right on each. So the closure of a list adds, for each file in it, its loader or its
//! interpreter (and, for `#!/usr/bin/env NAME`, `NAME` looked up on [`SEARCH_PATH`]), to a
//! bounded depth. Listing a script therefore makes its interpreter executable on its own too:
//! landlock grants the right per file, never per caller.
//!
//! The files read here are the host's system files and corral's own installs (the list comes
//! from corral's config, never from the sandboxed program), read with bounds on every offset.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Where a bare program name is looked up: the `PATH` corral gives sandboxed programs.
pub const SEARCH_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];
/// Most interpreters followed from one listed file (a script run by a script, ...).
const MAX_DEPTH: usize = 4;
/// Most program headers read from one ELF file.
const MAX_PHDRS: u16 = 256;

/// The list with what executing each of its files needs, each path once.
pub(crate) fn closure(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut todo: Vec<(PathBuf, usize)> = paths.iter().map(|p| (p.clone(), 0)).collect();
    while let Some((path, depth)) = todo.pop() {
        if out.contains(&path) {
            continue;
        }
        if depth < MAX_DEPTH
            && let Some(needed) = needs(&path)
        {
            todo.extend(needed.into_iter().map(|p| (p, depth + 1)));
        }
        out.push(path);
    }
    out
}

/// `name` looked up on [`SEARCH_PATH`] (an absolute path is returned as it is): the first
/// regular file found, or `None`.
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return Some(PathBuf::from(name));
    }
    if name.is_empty() || name.contains('/') {
        return None;
    }
    SEARCH_PATH
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
}

/// What executing the file at `path` needs besides it: its loader or its interpreter.
fn needs(path: &Path) -> Option<Vec<PathBuf>> {
    let mut f = std::fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = [0u8; 256];
    let n = read_up_to(&mut f, &mut head)?;
    let head = &head[..n];
    if head.starts_with(b"#!") {
        return Some(shebang(head));
    }
    if head.starts_with(b"\x7fELF") {
        return elf_interp(&mut f, head).map(|p| vec![p]);
    }
    None
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// The interpreter of a `#!` line (and, for `env`, the program it runs).
fn shebang(head: &[u8]) -> Vec<PathBuf> {
    let line = head[2..].split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_ascii_whitespace();
    let Some(interp) = words.next() else {
        return Vec::new();
    };
    let mut out = vec![PathBuf::from(interp)];
    if Path::new(interp).file_name().is_some_and(|n| n == "env") {
        // `#!/usr/bin/env python3`, `#!/usr/bin/env -S node --flag`.
        if let Some(found) = words
            .find(|w| !w.starts_with('-') && !w.contains('='))
            .and_then(find_program)
        {
            out.push(found);
        }
    }
    out
}

/// The `PT_INTERP` of a 64- or 32-bit little-endian ELF file (`None`: static, or unreadable).
fn elf_interp(f: &mut std::fs::File, head: &[u8]) -> Option<PathBuf> {
    const PT_INTERP: u32 = 3;
    let wide = match head.get(4)? {
        2 => true,
        1 => false,
        _ => return None,
    };
    if *head.get(5)? != 1 {
        return None; // big-endian: not this machine's.
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(head.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(head.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(head.get(o..o + 8)?.try_into().ok()?));
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?)
    } else {
        (u64::from(u32_at(0x1c)?), u16_at(0x2a)?, u16_at(0x2c)?)
    };
    let min_entry: u16 = if wide { 56 } else { 32 };
    if phentsize < min_entry || phnum > MAX_PHDRS {
        return None;
    }
    for i in 0..u64::from(phnum) {
        let mut ph = vec![0u8; usize::from(phentsize)];
        f.seek(SeekFrom::Start(
            phoff.checked_add(i.checked_mul(u64::from(phentsize))?)?,
        ))
        .ok()?;
        f.read_exact(&mut ph).ok()?;
        let word = |o: usize| Some(u32::from_le_bytes(ph.get(o..o + 4)?.try_into().ok()?));
        let long = |o: usize| Some(u64::from_le_bytes(ph.get(o..o + 8)?.try_into().ok()?));
        if word(0)? != PT_INTERP {
            continue;
        }
        let (offset, size) = if wide {
            (long(0x08)?, long(0x20)?)
        } else {
            (u64::from(word(0x04)?), u64::from(word(0x10)?))
        };
        if size == 0 || size > 4096 {
            return None;
        }
        let mut name = vec![0u8; usize::try_from(size).ok()?];
        f.seek(SeekFrom::Start(offset)).ok()?;
        f.read_exact(&mut name).ok()?;
        let name = name.split(|b| *b == 0).next()?;
        let name = std::str::from_utf8(name).ok()?;
        return name.starts_with('/').then(|| PathBuf::from(name));
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_elf_brings_its_loader_and_a_script_its_interpreter() {
        let sh = find_program("sh").expect("sh on PATH");
        let all = closure(std::slice::from_ref(&sh));
        assert!(all.contains(&sh));
        assert!(
            all.iter().any(|p| p.to_string_lossy().contains("ld-linux")),
            "the loader of {}: {all:?}",
            sh.display()
        );

        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("tool");
        std::fs::write(&script, "#!/usr/bin/env -S sh -e\necho hi\n").unwrap();
        let all = closure(std::slice::from_ref(&script));
        assert!(all.contains(&PathBuf::from("/usr/bin/env")), "{all:?}");
        assert!(all.contains(&sh), "{all:?}");
    }

    #[test]
    fn garbage_and_missing_files_need_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let elf = dir.path().join("bad");
        std::fs::write(&elf, b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\xff\xff\xff").unwrap();
        assert_eq!(closure(std::slice::from_ref(&elf)), vec![elf.clone()]);
        let gone = dir.path().join("gone");
        assert_eq!(closure(std::slice::from_ref(&gone)), vec![gone.clone()]);
        assert_eq!(find_program("no-such-program-here"), None);
        assert_eq!(find_program("a/b"), None);
    }
}
