//! `-a/--auto-args`: each function's arguments and return value from its DWARF types, as
//! uftrace's spec words (`i32`, `u8`, `s`, `p`, …): integers by size and signedness,
//! `char *` as a string, other pointers as `p`, named enums by name (`e:NAME`, their
//! enumerators for `info`), other enums by size, bool as an unsigned byte, `float` and
//! `double` as `f32` and `f64` (in the floating-point registers, which the CLI numbers
//! apart). A function taking a struct by value or a `long double` gets no spec (where its
//! value is, registers or memory, the convention decides case by case).

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

use gimli::{AttributeValue, DebuggingInformationEntry, EndianSlice, RunTimeEndian, Unit};

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// `f` over the DWARF of the sections `section` gives (by name), in the file's byte order.
fn with_dwarf<'d, T>(
    section: &dyn Fn(&str) -> Cow<'d, [u8]>,
    little_endian: bool,
    f: impl FnOnce(&gimli::Dwarf<R<'_>>) -> Result<T, gimli::Error>,
) -> Result<T, gimli::Error> {
    let endian = if little_endian {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let sections: gimli::DwarfSections<Cow<'d, [u8]>> =
        gimli::DwarfSections::load(|id| Ok::<_, gimli::Error>(section(id.name())))?;
    f(&sections.borrow(|s| EndianSlice::new(s, endian)))
}

/// One function's value formats: its arguments in order, and its return value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoSpec {
    pub addr: u64,
    pub name: String,
    /// Each argument's format word (`i32`, `s`, `p`, …).
    pub args: Vec<String>,
    pub ret: Option<String>,
    /// The enums its values are shown by (`e:NAME`): each name's enumerators and values.
    pub enums: Vec<(String, Vec<(String, i64)>)>,
}

/// Typedefs and qualifiers over one another; a malformed file could loop them.
const MAX_CHAIN: usize = 16;

/// What a type reads as: a format word, `None` for `void`, or `Err(())` for a value not
/// passed in a register of its own.
type Word = Result<Option<String>, ()>;

/// Every typed function's [`AutoSpec`].
pub(crate) fn auto_specs<'d>(
    section: &dyn Fn(&str) -> Cow<'d, [u8]>,
    little_endian: bool,
    threads: usize,
) -> Result<Vec<AutoSpec>, gimli::Error> {
    with_dwarf(section, little_endian, |dwarf| {
        let mut headers = Vec::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            headers.push(header);
        }
        // The units on `threads` threads (a kernel's ~3,000 take a second on one), taken in
        // turn; put back in the file's order, in which the first description of a
        // function wins.
        let next = AtomicUsize::new(0);
        let threads = threads.min(headers.len()).max(1);
        type Part = Result<Vec<(usize, Vec<AutoSpec>)>, gimli::Error>;
        let parts: Vec<Part> = std::thread::scope(|scope| {
            let work = || -> Part {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&header) = headers.get(i) else {
                        break;
                    };
                    mine.push((i, unit_specs(dwarf, header)?));
                }
                Ok(mine)
            };
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
            (handles.into_iter())
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        let mut all = Vec::new();
        for part in parts {
            all.extend(part?);
        }
        all.sort_unstable_by_key(|&(i, _)| i);
        Ok(all.into_iter().flat_map(|(_, specs)| specs).collect())
    })
}

/// [`auto_specs`] of one unit's functions.
fn unit_specs(
    dwarf: &gimli::Dwarf<R<'_>>,
    header: gimli::UnitHeader<R<'_>>,
) -> Result<Vec<AutoSpec>, gimli::Error> {
    let mut out = Vec::new();
    let unit = dwarf.unit(header)?;
    let mut tree = unit.entries_tree(None)?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        let entry = child.entry().clone();
        if entry.tag() != gimli::DW_TAG_subprogram {
            continue;
        }
        let Some(AttributeValue::Addr(addr)) = entry.attr_value(gimli::DW_AT_low_pc)? else {
            continue;
        };
        let Some(name) = entry_name(dwarf, &unit, &entry)? else {
            continue;
        };
        let Some((args, ret, enums)) = values_of(dwarf, &unit, child)? else {
            continue;
        };
        out.push(AutoSpec {
            addr,
            name,
            args,
            ret,
            enums,
        });
    }
    Ok(out)
}

/// A subprogram's argument words, return word and enums; `None` where a value is not
/// passed in a register of its own (a struct by value, a `long double`) or has no type.
#[allow(clippy::type_complexity)]
fn values_of(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<R<'_>>,
    node: gimli::EntriesTreeNode<'_, '_, '_, R<'_>>,
) -> Result<
    Option<(
        Vec<String>,
        Option<String>,
        Vec<(String, Vec<(String, i64)>)>,
    )>,
    gimli::Error,
> {
    let entry = node.entry().clone();
    let mut enums = Vec::new();
    let ret = match entry.attr_value(gimli::DW_AT_type)? {
        Some(AttributeValue::UnitRef(o)) => word(dwarf, unit, o, &mut enums)?,
        _ => Ok(None),
    };
    let mut args = Vec::new();
    let mut params = node.children();
    while let Some(p) = params.next()? {
        let e = p.entry();
        if e.tag() != gimli::DW_TAG_formal_parameter {
            continue;
        }
        match e.attr_value(gimli::DW_AT_type)? {
            Some(AttributeValue::UnitRef(o)) => match word(dwarf, unit, o, &mut enums)? {
                Ok(Some(w)) => args.push(w),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        }
    }
    Ok(Some((args, ret.ok().flatten(), enums)))
}

/// The kernel's syscall wrappers (`wrappers`: each `(entry address, syscall name)`, the
/// wrapper `__arm64_sys_openat` of `openat`): each syscall's own arguments from the DWARF of
/// its `__do_sys_NAME` (inlined into the wrapper, which takes only `struct pt_regs *`), found
/// in the wrapper's compilation unit (`.debug_aranges`; every unit where that has none).
/// One [`AutoSpec`] a syscall whose types are known, at its wrapper's address, named by the
/// syscall; no return value (the wrapper's is a `long`).
pub(crate) fn syscall_specs<'d>(
    section: &dyn Fn(&str) -> Cow<'d, [u8]>,
    little_endian: bool,
    wrappers: &[(u64, String)],
) -> Result<Vec<AutoSpec>, gimli::Error> {
    with_dwarf(section, little_endian, |dwarf| {
        // Which unit holds each address (its first range's), from the aranges.
        let mut ranges: Vec<(u64, u64, gimli::DebugInfoOffset)> = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Some(h) = headers.next()? {
            let cu = h.debug_info_offset();
            let mut entries = h.entries();
            while let Some(e) = entries.next()? {
                let r = e.range();
                ranges.push((r.begin, r.end, cu));
            }
        }
        let mut units: Vec<Option<gimli::DebugInfoOffset>> = wrappers
            .iter()
            .map(|(addr, _)| {
                (ranges.iter())
                    .find(|(b, e, _)| (*b..*e).contains(addr))
                    .map(|r| r.2)
            })
            .collect();
        let mut out = Vec::new();
        let mut all = dwarf.units();
        while let Some(header) = all.next()? {
            let offset = header.offset().as_debug_info_offset();
            // The units that hold a wrapper, or every unit for one the aranges do not place.
            let wanted: Vec<usize> = (0..wrappers.len())
                .filter(|&i| units[i].is_none() || units[i] == offset)
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let unit = dwarf.unit(header)?;
            let mut tree = unit.entries_tree(None)?;
            let root = tree.root()?;
            let mut children = root.children();
            while let Some(child) = children.next()? {
                if child.entry().tag() != gimli::DW_TAG_subprogram {
                    continue;
                }
                let Some(name) = entry_name(dwarf, &unit, child.entry())? else {
                    continue;
                };
                let Some(syscall) = name.strip_prefix("__do_sys_") else {
                    continue;
                };
                let Some(&i) = wanted.iter().find(|&&i| wrappers[i].1 == syscall) else {
                    continue;
                };
                if out.iter().any(|s: &AutoSpec| s.addr == wrappers[i].0) {
                    continue;
                }
                if let Some((args, _, enums)) = values_of(dwarf, &unit, child)? {
                    out.push(AutoSpec {
                        addr: wrappers[i].0,
                        name: syscall.to_string(),
                        args,
                        ret: None,
                        enums,
                    });
                }
                // Found: no other unit need be read for it.
                units[i] = offset;
            }
        }
        Ok(out)
    })
}

fn entry_name(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<R<'_>>,
    entry: &DebuggingInformationEntry<R<'_>>,
) -> Result<Option<String>, gimli::Error> {
    match entry.attr_value(gimli::DW_AT_name)? {
        Some(v) => Ok(Some(
            dwarf.attr_string(unit, v)?.to_string_lossy().into_owned(),
        )),
        None => Ok(None),
    }
}

/// The format word of the type at `offset`; a named enum's definition goes into `enums`.
fn word(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<R<'_>>,
    offset: gimli::UnitOffset,
    enums: &mut Vec<(String, Vec<(String, i64)>)>,
) -> Result<Word, gimli::Error> {
    let mut at = offset;
    for _ in 0..MAX_CHAIN {
        let e = unit.entry(at)?;
        let size = match e.attr_value(gimli::DW_AT_byte_size)? {
            Some(AttributeValue::Udata(n)) => n,
            Some(AttributeValue::Data1(n)) => u64::from(n),
            Some(AttributeValue::Data2(n)) => u64::from(n),
            _ => 0,
        };
        let bits = |n: u64| match n {
            1 | 2 | 4 | 8 => Some((n * 8).to_string()),
            _ => None,
        };
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type => match e.attr_value(gimli::DW_AT_type)? {
                Some(AttributeValue::UnitRef(o)) => at = o,
                _ => return Ok(Ok(None)),
            },
            gimli::DW_TAG_base_type => {
                let enc = match e.attr_value(gimli::DW_AT_encoding)? {
                    Some(AttributeValue::Encoding(enc)) => enc,
                    _ => return Ok(Err(())),
                };
                let Some(b) = bits(size) else {
                    return Ok(Err(()));
                };
                let plain_char = entry_name(dwarf, unit, &e)?.as_deref() == Some("char");
                return Ok(match enc {
                    // `char`, signed or not by the ABI (aarch64's and riscv64's are unsigned).
                    _ if size == 1 && plain_char => Ok(Some("c".into())),
                    gimli::DW_ATE_signed_char if size == 1 => Ok(Some("c".into())),
                    gimli::DW_ATE_signed | gimli::DW_ATE_signed_char => Ok(Some(format!("i{b}"))),
                    gimli::DW_ATE_unsigned
                    | gimli::DW_ATE_unsigned_char
                    | gimli::DW_ATE_boolean => Ok(Some(format!("u{b}"))),
                    gimli::DW_ATE_float if size == 4 || size == 8 => Ok(Some(format!("f{b}"))),
                    _ => Err(()),
                });
            }
            gimli::DW_TAG_enumeration_type => {
                // Named, its enumerators read: by name (uftrace's `e:NAME`); else by value.
                if let Some(name) = entry_name(dwarf, unit, &e)? {
                    let mut vals = Vec::new();
                    let mut tree = unit.entries_tree(Some(at))?;
                    let root = tree.root()?;
                    let mut kids = root.children();
                    while let Some(k) = kids.next()? {
                        let k = k.entry();
                        if k.tag() != gimli::DW_TAG_enumerator {
                            continue;
                        }
                        let value = match k.attr_value(gimli::DW_AT_const_value)? {
                            Some(AttributeValue::Sdata(v)) => v,
                            Some(AttributeValue::Udata(v)) => v as i64,
                            Some(AttributeValue::Data1(v)) => i64::from(v),
                            Some(AttributeValue::Data2(v)) => i64::from(v),
                            Some(AttributeValue::Data4(v)) => i64::from(v),
                            Some(AttributeValue::Data8(v)) => v as i64,
                            _ => continue,
                        };
                        if let Some(n) = entry_name(dwarf, unit, k)? {
                            vals.push((n, value));
                        }
                    }
                    if !vals.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        enums.push((name.clone(), vals));
                        return Ok(Ok(Some(format!("e:{name}"))));
                    }
                }
                return Ok(bits(if size == 0 { 4 } else { size })
                    .map(|b| Some(format!("i{b}")))
                    .ok_or(()));
            }
            gimli::DW_TAG_pointer_type => {
                return Ok(Ok(Some(
                    if points_at_char(unit, e.attr_value(gimli::DW_AT_type)?)? {
                        "s".into()
                    } else {
                        "p".into()
                    },
                )));
            }
            _ => return Ok(Err(())),
        }
    }
    Ok(Err(()))
}

/// Whether a pointer's target type is (a qualified or typedef'd) `char`.
fn points_at_char(
    unit: &Unit<R<'_>>,
    target: Option<AttributeValue<R<'_>>>,
) -> Result<bool, gimli::Error> {
    let Some(AttributeValue::UnitRef(mut at)) = target else {
        return Ok(false);
    };
    for _ in 0..MAX_CHAIN {
        let e = unit.entry(at)?;
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type => match e.attr_value(gimli::DW_AT_type)? {
                Some(AttributeValue::UnitRef(o)) => at = o,
                _ => return Ok(false),
            },
            gimli::DW_TAG_base_type => {
                let one = matches!(
                    e.attr_value(gimli::DW_AT_byte_size)?,
                    Some(AttributeValue::Udata(1)) | Some(AttributeValue::Data1(1))
                );
                return Ok(one
                    && matches!(
                        e.attr_value(gimli::DW_AT_encoding)?,
                        Some(AttributeValue::Encoding(
                            gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char
                        ))
                    ));
            }
            _ => return Ok(false),
        }
    }
    Ok(false)
}
