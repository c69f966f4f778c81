//! Man pages rendered from the clap definitions: `qemu-uftrace.1` and one
//! `qemu-uftrace-<sub>.1` per subcommand, as `clap_mangen::generate_to` names them.

/// `(file name, contents)` of every page.
pub fn pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = crate::args::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    render(cmd, &mut out)?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn render(cmd: clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render(sub.clone(), out)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let mut buf = Vec::new();
    man.render(&mut buf)?;
    out.push((man.get_filename(), buf));
    Ok(())
}
