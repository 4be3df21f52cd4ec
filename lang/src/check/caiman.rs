//! The asynchronous device forms of docs/language.md §7.8, after Caiman: `encode-begin`,
//! `encode-copy`, `encode-call`, `submit`, `await`, `fence-done` and `host-alloc`. All are host
//! code; the misuses the types show (a Lapis copy in `encode-call`, a fence where an encoder
//! goes) are reported here, the ones only a run shows (encoding into a submitted encoder) by the
//! runtime.

use super::context::{arity, syntax, type_error, BodyChecker};
use crate::reader::Sexp;
use crate::tree::{Expr, ExprKind};
use crate::types::Ty;

impl BodyChecker<'_, '_> {
    /// `(encode-begin gpu)`: a new encoder.
    pub(super) fn check_encode_begin(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [device] = operands else {
            self.error(arity(form.span, "`encode-begin` is `(encode-begin gpu)`"));
            return None;
        };
        if device.symbol() != Some("gpu") {
            self.error(
                syntax(device.span, format!("`encode-begin` encodes for the device `gpu`, found `{device}`"))
                    .with_note("the device is the one `:gpu` selects (CUDA or the simulator)"),
            );
            return None;
        }
        if !self.use_host(form.span, "`encode-begin`".into()) {
            return None;
        }
        Some(Expr { kind: ExprKind::EncodeBegin, ty: Ty::Encoder, span: form.span })
    }

    /// `(encode-copy E DST SRC n)`: a `gpu-copy` recorded into E.
    pub(super) fn check_encode_copy(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [encoder_form, rest @ ..] = operands else {
            self.error(arity(form.span, "`encode-copy` is `(encode-copy E DST SRC COUNT)`"));
            return None;
        };
        let encoder = self.handle(encoder_form, "encode-copy", Ty::Encoder);
        let copy = self.copy_operands(form, "encode-copy", rest);
        let (encoder, [destination, source, count]) = (encoder?, copy?);
        let direction = self.copy_direction(form, "encode-copy", &destination, &source)?;
        if !self.check_index("encode-copy", &count) {
            return None;
        }
        Some(Expr {
            kind: ExprKind::EncodeCopy(direction, Box::new([encoder, destination, source, count])),
            ty: Ty::Void,
            span: form.span,
        })
    }

    /// `(encode-call E K (grid …) (block …) ARG…)`: a launch recorded into E.
    pub(super) fn check_encode_call(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [encoder_form, rest @ ..] = operands else {
            self.error(arity(
                form.span,
                "a launch is `(encode-call E KERNEL (grid X [Y [Z]]) (block X [Y [Z]]) ARG…)`",
            ));
            return None;
        };
        let encoder = self.handle(encoder_form, "encode-call", Ty::Encoder);
        let launch = self.launch_parts(form, "encode-call", rest);
        let (encoder, launch) = (encoder?, launch?);
        Some(Expr { kind: ExprKind::EncodeCall(Box::new(encoder), Box::new(launch)), ty: Ty::Void, span: form.span })
    }

    /// `(submit E)` → fence, `(await F)`, `(fence-done F)` → bool.
    pub(super) fn check_fence_form(&mut self, form: &Sexp, name: &str, operands: &[Sexp]) -> Option<Expr> {
        let [operand] = operands else {
            let operand = if name == "submit" { "ENCODER" } else { "FENCE" };
            self.error(arity(form.span, format!("`{name}` is `({name} {operand})`")));
            return None;
        };
        let wanted = if name == "submit" { Ty::Encoder } else { Ty::Fence };
        let value = self.handle(operand, name, wanted)?;
        if !self.use_host(form.span, format!("`{name}`")) {
            return None;
        }
        let (kind, ty) = match name {
            "submit" => (ExprKind::Submit(Box::new(value)), Ty::Fence),
            "await" => (ExprKind::Await(Box::new(value)), Ty::Void),
            _ => (ExprKind::FenceDone(Box::new(value)), Ty::Bool),
        };
        Some(Expr { kind, ty, span: form.span })
    }

    /// `(host-alloc T n)`: page-locked host memory, a `(ptr T)`.
    pub(super) fn check_host_alloc(&mut self, form: &Sexp, operands: &[Sexp]) -> Option<Expr> {
        let [type_form, count_form] = operands else {
            self.error(arity(form.span, "`host-alloc` is `(host-alloc TYPE COUNT)`"));
            return None;
        };
        if !self.use_host(form.span, "`host-alloc`".into()) {
            return None;
        }
        let element = self.ty(type_form);
        let count = self.check_expr(count_form);
        let (element, count) = (element?, count?);
        if !crate::types::is_buffer_element(&element) {
            self.error(
                type_error(type_form.span, format!("`host-alloc` holds integers or floats, not `{element}`"))
                    .with_note("it is memory to copy to and from device buffers, which hold integers or floats"),
            );
            return None;
        }
        if !self.check_index("host-alloc", &count) {
            return None;
        }
        let ty = Ty::ptr(element.clone());
        Some(Expr { kind: ExprKind::HostAlloc(element, Box::new(count)), ty, span: form.span })
    }

    /// An operand that must be an encoder or a fence.
    fn handle(&mut self, form: &Sexp, name: &str, wanted: Ty) -> Option<Expr> {
        let value = self.check_expr(form)?;
        if value.ty != wanted {
            let note = match (&wanted, &value.ty) {
                (Ty::Encoder, Ty::Fence) => {
                    "`submit` turned the encoder into this fence: encode into a new `(encode-begin gpu)`"
                }
                (Ty::Fence, Ty::Encoder) => "`(submit E)` starts an encoder's commands and gives the fence to await",
                (Ty::Encoder, _) => "an encoder comes from `(encode-begin gpu)`",
                _ => "a fence comes from `(submit E)`",
            };
            self.error(
                type_error(value.span, format!("`{name}` needs `{wanted}`, found `{}`", value.ty)).with_note(note),
            );
            return None;
        }
        Some(value)
    }
}
