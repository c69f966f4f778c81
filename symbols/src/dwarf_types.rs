//! Where a member sits in a struct, from DWARF type information: the plugin names a Linux
//! guest's tasks by reading `task_struct.comm`, whose offset depends on the kernel's
//! configuration.
//!
//! Fast at kernel scale (a vmlinux has ~175 MB of `.debug_info`): the name is looked for in
//! the string sections first, so a file whose DWARF never mentions the struct is rejected
//! without parsing it (or reading most of it); then only the top-level entries of each unit are read (the compiler's
//! `DW_AT_sibling` links skip their children), and the first complete definition ends the
//! walk. Every unit of a kernel that includes `<linux/sched.h>` defines `task_struct` (in
//! Debian's vmlinux the first one, init/main.c, does: ~2 ms, ~60 ms from a cold page cache),
//! and all agree on its layout (even under `RANDSTRUCT`, whose seed is per build).

use std::borrow::Cow;

use gimli::{
    AttributeValue, DebuggingInformationEntry, EndianSlice, RunTimeEndian, SectionId, Unit,
    UnitOffset,
};

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// Why no offset came out, before the caller adds the file's name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Missing {
    NoDwarf,
    NoStruct,
    NoMember,
    Corrupt(String),
}

impl From<gimli::Error> for Missing {
    fn from(e: gimli::Error) -> Self {
        Missing::Corrupt(e.to_string())
    }
}

/// Anonymous struct and union members nest (C11); a malformed file could loop them.
const MAX_NESTING: usize = 8;

/// The byte offset of `member` in the first complete definition of `struct structure`
/// (members of anonymous structs and unions inside it count as its own, as in C).
/// `section` returns a section's contents by name, empty when absent.
pub(crate) fn member_offset<'d>(
    section: &dyn Fn(&str) -> Cow<'d, [u8]>,
    little_endian: bool,
    structure: &str,
    member: &str,
) -> Result<u64, Missing> {
    let endian = if little_endian {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    // Only what names and types need (and what gimli reads for each unit's root: its line
    // program header and base address): a compressed vmlinux would otherwise decompress
    // its location and range lists for nothing. The string sections come first, then the
    // entries: the scan below relies on that order.
    let mut loaded: Vec<(SectionId, Cow<'d, [u8]>)> = [
        SectionId::DebugStr,
        SectionId::DebugLineStr,
        SectionId::DebugInfo,
        SectionId::DebugTypes,
        SectionId::DebugAbbrev,
        SectionId::DebugStrOffsets,
        SectionId::DebugLine,
        SectionId::DebugAddr,
    ]
    .into_iter()
    .map(|id| (id, section(id.name())))
    .collect();
    let bytes = |id| {
        loaded
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(&[][..], |(_, d)| &d[..])
    };
    if bytes(SectionId::DebugInfo).is_empty() && bytes(SectionId::DebugTypes).is_empty() {
        return Err(Missing::NoDwarf);
    }
    // GCC and Clang put every name longer than a section offset in the string sections (for
    // the linker to merge), so a long name missing there is missing; a short one, or any
    // name in a file without string sections, may be inline (`DW_FORM_string`), and only
    // then are the entries themselves scanned (a cold 175 MB read for a big ELF).
    let mut needle = structure.as_bytes().to_vec();
    needle.push(0);
    let finder = memchr::memmem::Finder::new(&needle);
    let found_in = |d: &[u8]| finder.find(d).is_some();
    let (strings, entries) = loaded.split_at(2);
    let no_strings = strings.iter().all(|(_, d)| d.is_empty());
    let mentioned = strings.iter().any(|(_, d)| found_in(d))
        || ((needle.len() <= 8 || no_strings) && entries[..2].iter().any(|(_, d)| found_in(d)));
    if !mentioned {
        return Err(Missing::NoStruct);
    }
    let sections: gimli::DwarfSections<Cow<'d, [u8]>> = gimli::DwarfSections::load(|id| {
        Ok::<_, gimli::Error>(match loaded.iter().position(|(i, _)| *i == id) {
            Some(at) => loaded.swap_remove(at).1,
            None => Cow::Borrowed(&[][..]),
        })
    })?;
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));

    let mut units = dwarf.units();
    // A unit that does not parse is an error: a later definition cannot be told from it.
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        if let Some(found) = in_unit(&dwarf, &unit, structure, member)? {
            return found;
        }
    }
    // DWARF 4 type units (-fdebug-types-section) live apart; DWARF 5's are in .debug_info.
    let mut units = dwarf.type_units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        if let Some(found) = in_unit(&dwarf, &unit, structure, member)? {
            return found;
        }
    }
    Err(Missing::NoStruct)
}

/// `None` when the unit has no complete definition of the struct at its top level;
/// otherwise the answer (a definition without the member is final: every definition of a
/// struct in one program has the same members).
fn in_unit(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<R<'_>>,
    structure: &str,
    member: &str,
) -> Result<Option<Result<u64, Missing>>, Missing> {
    let mut tree = unit.entries_tree(None)?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        let entry = child.entry();
        if entry.tag() != gimli::DW_TAG_structure_type
            || !named(dwarf, unit, entry, structure)?
            || is_declaration(entry)?
        {
            continue;
        }
        let offset = entry.offset();
        return Ok(Some(
            find_member(dwarf, unit, offset, member, 0)?.ok_or(Missing::NoMember),
        ));
    }
    Ok(None)
}

/// Where an anonymous member's type is: in the same unit, or in a type unit
/// (`-fdebug-types-section` refers to it by signature).
enum TypeRef {
    Here(UnitOffset),
    Signature(gimli::DebugTypeSignature),
}

/// The offset of `member` among the members of the struct or union at `offset`, looking
/// into anonymous struct and union members.
fn find_member(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<R<'_>>,
    offset: UnitOffset,
    member: &str,
    depth: usize,
) -> Result<Option<u64>, Missing> {
    if depth > MAX_NESTING {
        return Err(Missing::Corrupt("anonymous members nest too deep".into()));
    }
    let mut tree = unit.entries_tree(Some(offset))?;
    let root = tree.root()?;
    let union = match root.entry().tag() {
        gimli::DW_TAG_union_type => true,
        gimli::DW_TAG_structure_type => false,
        _ => return Ok(None),
    };
    let mut children = root.children();
    // Anonymous members are looked into after the named ones: their types are other
    // entries, and a second tree cannot be walked while this one is borrowed.
    let mut anonymous = Vec::new();
    while let Some(child) = children.next()? {
        let entry = child.entry();
        if entry.tag() != gimli::DW_TAG_member {
            continue;
        }
        if named(dwarf, unit, entry, member)? {
            return location(entry, union, unit.encoding()).map(Some);
        }
        if entry.attr_value(gimli::DW_AT_name)?.is_none() {
            let ty = match entry.attr_value(gimli::DW_AT_type)? {
                Some(AttributeValue::UnitRef(o)) => TypeRef::Here(o),
                Some(AttributeValue::DebugTypesRef(sig)) => TypeRef::Signature(sig),
                _ => continue,
            };
            anonymous.push((location(entry, union, unit.encoding())?, ty));
        }
    }
    for (base, ty) in anonymous {
        let inner = match ty {
            TypeRef::Here(o) => find_member(dwarf, unit, o, member, depth + 1)?,
            TypeRef::Signature(sig) => match type_unit(dwarf, sig)? {
                Some((other, o)) => find_member(dwarf, &other, o, member, depth + 1)?,
                None => None,
            },
        };
        if let Some(inner) = inner {
            return base
                .checked_add(inner)
                .map(Some)
                .ok_or_else(|| Missing::Corrupt("member offset overflows".into()));
        }
    }
    Ok(None)
}

/// The type unit with signature `sig` and its type's offset: DWARF 5 keeps type units in
/// `.debug_info`, DWARF 4 in `.debug_types`. Only headers are read on the way.
fn type_unit<'d>(
    dwarf: &gimli::Dwarf<R<'d>>,
    sig: gimli::DebugTypeSignature,
) -> Result<Option<(Unit<R<'d>>, UnitOffset)>, Missing> {
    let matches = |header: &gimli::UnitHeader<R<'d>>| match header.type_() {
        gimli::UnitType::Type {
            type_signature,
            type_offset,
        } if type_signature == sig => Some(type_offset),
        _ => None,
    };
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        if let Some(o) = matches(&header) {
            return Ok(Some((dwarf.unit(header)?, o)));
        }
    }
    let mut units = dwarf.type_units();
    while let Some(header) = units.next()? {
        if let Some(o) = matches(&header) {
            return Ok(Some((dwarf.unit(header)?, o)));
        }
    }
    Ok(None)
}

/// A member's byte offset: a constant (DWARF 4 on), or the DWARF 2/3 expression
/// `DW_OP_plus_uconst N`; union members may leave it out (offset 0).
fn location(
    entry: &DebuggingInformationEntry<'_, '_, R<'_>>,
    union: bool,
    encoding: gimli::Encoding,
) -> Result<u64, Missing> {
    match entry.attr_value(gimli::DW_AT_data_member_location)? {
        Some(AttributeValue::Exprloc(expr)) => {
            let mut ops = expr.operations(encoding);
            match (ops.next()?, ops.next()?) {
                (Some(gimli::Operation::PlusConstant { value }), None) => Ok(value),
                _ => Err(Missing::Corrupt(
                    "member location is not a constant offset".into(),
                )),
            }
        }
        Some(AttributeValue::Sdata(v)) => {
            u64::try_from(v).map_err(|_| Missing::Corrupt(format!("negative member offset {v}")))
        }
        Some(v) => v
            .udata_value()
            .ok_or_else(|| Missing::Corrupt("member location is not a constant offset".into())),
        None => match entry.attr_value(gimli::DW_AT_data_bit_offset)? {
            Some(v) => match v.udata_value() {
                Some(bits) if bits % 8 == 0 => Ok(bits / 8),
                _ => Err(Missing::Corrupt("member is a bit-field".into())),
            },
            None if union => Ok(0),
            None => Err(Missing::Corrupt("member has no location".into())),
        },
    }
}

fn named(
    dwarf: &gimli::Dwarf<R<'_>>,
    unit: &Unit<R<'_>>,
    entry: &DebuggingInformationEntry<'_, '_, R<'_>>,
    name: &str,
) -> Result<bool, Missing> {
    let Some(value) = entry.attr_value(gimli::DW_AT_name)? else {
        return Ok(false);
    };
    Ok(dwarf.attr_string(unit, value)?.slice() == name.as_bytes())
}

/// A declaration (`struct task_struct;`), or a reference to a type unit's definition.
fn is_declaration(entry: &DebuggingInformationEntry<'_, '_, R<'_>>) -> Result<bool, Missing> {
    if matches!(
        entry.attr_value(gimli::DW_AT_declaration)?,
        Some(AttributeValue::Flag(true))
    ) {
        return Ok(true);
    }
    Ok(entry.attr_value(gimli::DW_AT_signature)?.is_some())
}
