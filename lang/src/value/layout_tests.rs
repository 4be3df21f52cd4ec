//! C layout of types on x86-64 (`layout`, `size_align`, `struct_layout`): sizes, alignments,
//! field offsets and padding, as clang lays out the same C types.

use expect_test::{expect, Expect};

use super::*;
use crate::reader::{self, Sexp, SourceId};
use crate::types::parse_type;

/// The structs of `definitions`, written `(define-struct NAME (FIELD TYPE)…)` (without fields:
/// opaque).
fn structs(definitions: &str) -> HashMap<String, StructEntry> {
    let forms = reader::read(SourceId(0), definitions).expect("struct definitions read");
    let name = |form: &Sexp| form.list().and_then(|items| items.get(1)).and_then(Sexp::symbol).map(str::to_string);
    let names: Vec<String> = forms.iter().filter_map(name).collect();
    let known = |struct_name: &str| names.iter().any(|name| name == struct_name);
    forms
        .iter()
        .map(|form| {
            let items = form.list().expect("a define-struct form");
            let fields: Vec<(String, Ty)> = items[2..]
                .iter()
                .map(|field| {
                    let [field_name, ty] = field.list().expect("a field (NAME TYPE)") else { panic!("{field}") };
                    let ty = parse_type(ty, &known).unwrap_or_else(|error| panic!("{}", error.message));
                    (field_name.to_string(), ty)
                })
                .collect();
            (name(form).expect("a struct name"), StructEntry { fields: (items.len() > 2).then_some(fields) })
        })
        .collect()
}

/// Each type of `types` (C-Lisp spellings) with its size and alignment, and for a struct the
/// offset of every field; `layout` and `struct_layout` must agree on a struct's size.
fn check(definitions: &str, types: &str, expect: Expect) {
    let structs = structs(definitions);
    let known = |name: &str| structs.contains_key(name);
    let lines: Vec<String> = reader::read(SourceId(0), types)
        .expect("types read")
        .iter()
        .map(|form| {
            let ty = parse_type(form, &known).unwrap_or_else(|error| panic!("{}", error.message));
            let (size, align) = layout(&ty, &|name| structs.get(name).and_then(|entry| entry.fields.clone()));
            let mut line = format!("{ty}: size {size}, align {align}");
            if let Ty::Struct(name) = &ty {
                let fields = structs[&**name].fields.clone().unwrap_or_default();
                let (offsets, struct_size, struct_align) = struct_layout(&fields, &structs);
                assert_eq!((struct_size as u64, struct_align as u64), (size, align), "struct_layout of {ty}");
                for ((field, _), offset) in fields.iter().zip(offsets) {
                    line.push_str(&format!(", {field}@{offset}"));
                }
            }
            line
        })
        .collect();
    expect.assert_eq(&lines.join("\n"));
}

const STRUCTS: &str = "
(define-struct point (x int) (y int))
(define-struct padded (a int8) (b int64) (c int16))
(define-struct tail (wide int64) (flag bool))
(define-struct small (a int8) (b int16) (c int8))
(define-struct floats (f float) (d double) (g float))
(define-struct nested (tag int8) (inner (struct padded)) (last int8))
(define-struct with-array (tag bool) (values (arr 3 float)))
(define-struct node (value int) (next (ptr (struct node))))
(define-struct handle)
(define-struct buffers (count int) (buffer (gpu-buf float)))
";

#[test]
fn scalars_and_pointers() {
    check(
        STRUCTS,
        "bool int8 int16 int int32 int64 float double void (ptr int8) (ptr (struct handle))
         (ptr double (addrspace 3)) (gpu-buf float)",
        expect![[r#"
            bool: size 1, align 1
            int8: size 1, align 1
            int16: size 2, align 2
            int: size 4, align 4
            int: size 4, align 4
            int64: size 8, align 8
            float: size 4, align 4
            double: size 8, align 8
            void: size 0, align 1
            (ptr int8): size 8, align 8
            (ptr (struct handle)): size 8, align 8
            (ptr double (addrspace 3)): size 8, align 8
            (gpu-buf float): size 8, align 8"#]],
    );
}

#[test]
fn arrays() {
    check(
        STRUCTS,
        "(arr 3 int8) (arr 3 int16) (arr 5 double) (arr 2 (arr 3 int)) (arr 2 (struct padded))
         (arr 3 (struct small)) (arr 1 bool)",
        expect![[r#"
            (arr 3 int8): size 3, align 1
            (arr 3 int16): size 6, align 2
            (arr 5 double): size 40, align 8
            (arr 2 (arr 3 int)): size 24, align 4
            (arr 2 (struct padded)): size 48, align 8
            (arr 3 (struct small)): size 18, align 2
            (arr 1 bool): size 1, align 1"#]],
    );
}

#[test]
fn structs_with_padding() {
    check(
        STRUCTS,
        "(struct point) (struct padded) (struct tail) (struct small) (struct floats) (struct nested)
         (struct with-array) (struct node) (struct handle) (struct buffers)",
        expect![[r#"
            (struct point): size 8, align 4, x@0, y@4
            (struct padded): size 24, align 8, a@0, b@8, c@16
            (struct tail): size 16, align 8, wide@0, flag@8
            (struct small): size 6, align 2, a@0, b@2, c@4
            (struct floats): size 24, align 8, f@0, d@8, g@16
            (struct nested): size 40, align 8, tag@0, inner@8, last@32
            (struct with-array): size 16, align 4, tag@0, values@4
            (struct node): size 16, align 8, value@0, next@8
            (struct handle): size 0, align 1
            (struct buffers): size 16, align 8, count@0, buffer@8"#]],
    );
}

#[test]
fn sizes_saturate_instead_of_overflowing() {
    check(
        "(define-struct huge (a (arr 4294967295 (arr 4294967295 int64))) (b int8))
         (define-struct loop (self (struct loop)))",
        "(arr 4294967295 (arr 4294967295 int64)) (struct huge) (struct loop)",
        expect![[r#"
            (arr 4294967295 (arr 4294967295 int64)): size 18446744073709551615, align 8
            (struct huge): size 18446744073709551615, align 8, a@0, b@18446744073709551615
            (struct loop): size 18446744073709551615, align 1, self@0"#]],
    );
    // In host sizes too: the session sizes storage with `size_align`.
    let ty = Ty::Arr(4294967295, Ty::Arr(4294967295, Ty::Int(64).into()).into());
    assert_eq!(size_align(&ty, &HashMap::new()), (usize::MAX, 8));
}
