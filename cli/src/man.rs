//! Man pages rendered from the clap definitions: `qemu-uftrace.1` and one
//! `qemu-uftrace-<sub>.1` per subcommand, as `clap_mangen::generate_to` names them.

use clap_mangen::roff::{bold, roman, Roff};

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
    let record = cmd.get_name() == "record";
    let man = clap_mangen::Man::new(cmd);
    let mut buf = Vec::new();
    if record {
        // clap_mangen's own order, with the counts before VERSION: 30 entries that would
        // otherwise make `record --help` too long to read.
        man.render_title(&mut buf)?;
        man.render_name_section(&mut buf)?;
        man.render_synopsis_section(&mut buf)?;
        man.render_description_section(&mut buf)?;
        man.render_options_section(&mut buf)?;
        man.render_extra_section(&mut buf)?;
        counts_section().to_writer(&mut buf)?;
        man.render_version_section(&mut buf)?;
    } else {
        man.render(&mut buf)?;
    }
    out.push((man.get_filename(), buf));
    Ok(())
}

/// What each count of `plugin.stats` means, from the table the summary itself uses.
fn counts_section() -> Roff {
    let mut roff = Roff::default();
    roff.control("SH", ["COUNTS"]);
    roff.text([roman(
        "The counts in plugin.stats (the trace directory); record's last lines show only \
         those that need action.",
    )]);
    for c in crate::stats::COUNTS {
        roff.control("TP", []);
        roff.text([bold(c.key)]);
        roff.text([roman(match c.action {
            Some(a) => format!("{} (shown when not 0: {a})", c.meaning),
            None => c.meaning.to_string(),
        })]);
    }
    roff
}
