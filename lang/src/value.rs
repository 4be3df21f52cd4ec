//! Values: C layout of types on x86-64, and spelling values as the language prints them.

use std::collections::HashMap;

use crate::tree::{Constant, MAX_NESTING};
use crate::types::{StructEntry, Ty};

/// The fields of a struct by name (`None`: opaque or unknown).
pub(crate) type FieldsOf<'a> = dyn Fn(&str) -> Option<Vec<(String, Ty)>> + 'a;

/// Size and alignment in bytes under the x86-64 C ABI (what LLVM's data layout gives), with
/// each struct's fields from `fields_of`. Saturating, and bounded in depth, so it is safe on
/// absurdly large types and on the struct cycles the checker reports.
pub(crate) fn layout(ty: &Ty, fields_of: &FieldsOf<'_>) -> (u64, u64) {
    layout_at(ty, fields_of, 0)
}

fn layout_at(ty: &Ty, fields_of: &FieldsOf<'_>, depth: usize) -> (u64, u64) {
    match ty {
        Ty::Bool | Ty::Int(8) => (1, 1),
        Ty::Int(16) => (2, 2),
        Ty::Int(32) | Ty::Float => (4, 4),
        Ty::Int(_) | Ty::Double | Ty::Ptr(..) | Ty::GpuBuf(_) | Ty::Encoder | Ty::Fence => (8, 8),
        Ty::Void => (0, 1),
        _ if depth > MAX_NESTING => (u64::MAX, 1),
        Ty::Arr(length, element) => {
            let (size, align) = layout_at(element, fields_of, depth + 1);
            (size.saturating_mul(*length), align)
        }
        Ty::Struct(name) => {
            let (mut offset, mut max_align) = (0u64, 1u64);
            for (_, field) in fields_of(name).unwrap_or_default() {
                let (size, align) = layout_at(&field, fields_of, depth + 1);
                offset = offset.checked_next_multiple_of(align).unwrap_or(u64::MAX).saturating_add(size);
                max_align = max_align.max(align);
            }
            (offset.checked_next_multiple_of(max_align).unwrap_or(u64::MAX), max_align)
        }
    }
}

/// `layout` over a session's structs, in host sizes. The checker refuses values too large to
/// hold (`check::MAX_VALUE_BYTES`), but a pointer may still point to an absurdly large type.
pub(crate) fn size_align(ty: &Ty, structs: &HashMap<String, StructEntry>) -> (usize, usize) {
    let (size, align) = layout(ty, &|name| structs.get(name).and_then(|entry| entry.fields.clone()));
    (usize::try_from(size).unwrap_or(usize::MAX), usize::try_from(align).unwrap_or(usize::MAX))
}

/// Field offsets, total size and alignment of a struct with C layout.
pub(crate) fn struct_layout(
    fields: &[(String, Ty)],
    structs: &HashMap<String, StructEntry>,
) -> (Vec<usize>, usize, usize) {
    let mut offset: usize = 0;
    let mut max_align: usize = 1;
    let mut offsets = Vec::with_capacity(fields.len());
    for (_, ty) in fields {
        let (size, align) = size_align(ty, structs);
        offset = offset.checked_next_multiple_of(align).unwrap_or(usize::MAX);
        offsets.push(offset);
        offset = offset.saturating_add(size);
        max_align = max_align.max(align);
    }
    (offsets, offset.checked_next_multiple_of(max_align).unwrap_or(usize::MAX), max_align)
}

/// The elements of a buffer as a value prints them: all up to 16, else the first 8, `…` and
/// the last 2 (as arrays print). `elements` holds the ones `shown_indices` names, in order.
pub(crate) fn buffer_text(length: u64, element: &Ty, elements: &[u8]) -> String {
    let (size, _) = size_align(element, &HashMap::new());
    let shown: Vec<String> = (0..elements.len() / size.max(1))
        .map(|index| format_value(elements, index * size, element, &HashMap::new()))
        .collect();
    let parts: Vec<String> = if length > 16 && shown.len() == 10 {
        shown[..8].iter().cloned().chain(std::iter::once("…".to_string())).chain(shown[8..].iter().cloned()).collect()
    } else {
        shown
    };
    format!("<gpu {length} × {element}> [{}]", parts.join(", "))
}

/// The element indices a printed buffer of `length` shows (see `buffer_text`).
pub(crate) fn buffer_shown_indices(length: u64) -> Vec<u64> {
    if length > 16 {
        (0..8).chain(length - 2..length).collect()
    } else {
        (0..length).collect()
    }
}

/// The bytes of a constant of type `ty` at `offset` (C layout). `address_of` gives the address
/// of another global for `(ptr-to G)` initialisers (device copies pass zero: they cannot point
/// into host memory).
pub(crate) fn encode_constant(
    bytes: &mut [u8],
    offset: usize,
    ty: &Ty,
    constant: &Constant,
    structs: &HashMap<String, StructEntry>,
    address_of: &dyn Fn(&str) -> usize,
) {
    let mut put = |data: &[u8]| {
        if let Some(target) = bytes.get_mut(offset..offset + data.len()) {
            target.copy_from_slice(data);
        }
    };
    match (ty, constant) {
        (Ty::Bool, Constant::Bool(value)) => put(&[u8::from(*value)]),
        (Ty::Int(8), Constant::Int(value)) => put(&(*value as i8).to_ne_bytes()),
        (Ty::Int(16), Constant::Int(value)) => put(&(*value as i16).to_ne_bytes()),
        (Ty::Int(32), Constant::Int(value)) => put(&(*value as i32).to_ne_bytes()),
        (Ty::Int(_), Constant::Int(value)) => put(&value.to_ne_bytes()),
        (Ty::Float, Constant::Float(value)) => put(&(*value as f32).to_ne_bytes()),
        (Ty::Double, Constant::Float(value)) => put(&value.to_ne_bytes()),
        (Ty::Ptr(..), Constant::AddressOf(target)) => put(&(address_of(target) as u64).to_ne_bytes()),
        (Ty::Arr(_, element), Constant::Aggregate(values)) => {
            let (size, _) = size_align(element, structs);
            for (index, value) in values.iter().enumerate() {
                encode_constant(bytes, offset + index * size, element, value, structs, address_of);
            }
        }
        (Ty::Struct(name), Constant::Aggregate(values)) => {
            let fields = structs.get(&**name).and_then(|entry| entry.fields.clone()).unwrap_or_default();
            let (offsets, _, _) = struct_layout(&fields, structs);
            for ((value, (_, field_ty)), field_offset) in values.iter().zip(&fields).zip(offsets) {
                encode_constant(bytes, offset + field_offset, field_ty, value, structs, address_of);
            }
        }
        _ => {}
    }
}

/// Spells a float as the language does: shortest round-trip decimal, `inf`, `nan`.
fn float_text<T: std::fmt::Debug + Copy + Into<f64>>(value: T) -> String {
    let wide: f64 = value.into();
    if wide.is_nan() {
        "nan".into()
    } else if wide.is_infinite() {
        if wide > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else {
        format!("{value:?}")
    }
}

fn read<const N: usize>(bytes: &[u8], offset: usize) -> [u8; N] {
    let mut out = [0; N];
    if let Some(slice) = bytes.get(offset..offset + N) {
        out.copy_from_slice(slice);
    }
    out
}

/// Spells a device buffer from its handle and element type (the session reads its contents).
pub(crate) type DescribeBuffer<'a> = &'a dyn Fn(u64, &Ty) -> String;

/// How a buffer handle reads without a device to ask: `<gpu null>` for none.
fn buffer_handle_text(handle: u64, _element: &Ty) -> String {
    if handle == 0 {
        "<gpu null>".into()
    } else {
        format!("<gpu buffer {handle}>")
    }
}

/// Spells the value of type `ty` stored at `offset` in `bytes`.
pub(crate) fn format_value(bytes: &[u8], offset: usize, ty: &Ty, structs: &HashMap<String, StructEntry>) -> String {
    format_value_with(bytes, offset, ty, structs, &buffer_handle_text)
}

/// `format_value`, with device buffers spelled by `buffers`.
pub(crate) fn format_value_with(
    bytes: &[u8],
    offset: usize,
    ty: &Ty,
    structs: &HashMap<String, StructEntry>,
    buffers: DescribeBuffer<'_>,
) -> String {
    let format_value = |bytes: &[u8], offset: usize, ty: &Ty, structs: &HashMap<String, StructEntry>| {
        format_value_with(bytes, offset, ty, structs, buffers)
    };
    match ty {
        Ty::GpuBuf(element) => buffers(u64::from_ne_bytes(read(bytes, offset)), element),
        Ty::Encoder => format!("<encoder {}>", u64::from_ne_bytes(read(bytes, offset))),
        Ty::Fence => format!("<fence {}>", u64::from_ne_bytes(read(bytes, offset))),
        Ty::Bool => {
            if bytes.get(offset).copied().unwrap_or(0) & 1 == 1 {
                "#t".into()
            } else {
                "#f".into()
            }
        }
        Ty::Int(8) => i8::from_ne_bytes(read(bytes, offset)).to_string(),
        Ty::Int(16) => i16::from_ne_bytes(read(bytes, offset)).to_string(),
        Ty::Int(32) => i32::from_ne_bytes(read(bytes, offset)).to_string(),
        Ty::Int(_) => i64::from_ne_bytes(read(bytes, offset)).to_string(),
        Ty::Float => float_text(f32::from_ne_bytes(read(bytes, offset))),
        Ty::Double => float_text(f64::from_ne_bytes(read(bytes, offset))),
        Ty::Ptr(..) => format!("{:#x}", u64::from_ne_bytes(read(bytes, offset))),
        Ty::Void => String::new(),
        Ty::Arr(length, element) => {
            let (size, _) = size_align(element, structs);
            let length = *length as usize;
            let element_text = |index: usize| format_value(bytes, offset + index * size, element, structs);
            let parts: Vec<String> = if length > 16 {
                (0..8)
                    .map(element_text)
                    .chain(std::iter::once("…".to_string()))
                    .chain((length - 2..length).map(element_text))
                    .collect()
            } else {
                (0..length).map(element_text).collect()
            };
            format!("[{}]", parts.join(", "))
        }
        Ty::Struct(name) => {
            let Some(fields) = structs.get(&**name).and_then(|entry| entry.fields.as_ref()) else {
                return format!("<opaque {name}>");
            };
            let (offsets, _, _) = struct_layout(fields, structs);
            let parts: Vec<String> = fields
                .iter()
                .zip(offsets)
                .map(|((field, ty), field_offset)| {
                    format!("{field}: {}", format_value(bytes, offset + field_offset, ty, structs))
                })
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_the_language_says() {
        let none = HashMap::new();
        let text = |value: f64, ty: &Ty| {
            let bytes =
                if *ty == Ty::Float { (value as f32).to_ne_bytes().to_vec() } else { value.to_ne_bytes().to_vec() };
            format_value(&bytes, 0, ty, &none)
        };
        assert_eq!(text(0.1, &Ty::Float), "0.1");
        assert_eq!(text(2.0, &Ty::Double), "2.0");
        assert_eq!(text(1e20, &Ty::Float), "1e20");
        assert_eq!(text(f64::NAN, &Ty::Double), "nan");
        assert_eq!(text(f64::NEG_INFINITY, &Ty::Double), "-inf");
    }
}

#[cfg(test)]
mod layout_tests;
