//! Reader: cell text to spanned forms; "is this input complete?" for every front end.
//!
//! One lexer serves the compiler and the line editors, so there is exactly one paren counter.
//! lexpr was the first choice, but it reports an unclosed list at the end of the input rather
//! than at its opening bracket, keeps only line/column positions, and lacks Guile's `#| |#`,
//! `+inf.0` and `0x…` spellings that the language needs; this reader keeps byte spans instead.

pub(crate) mod pretty;

use std::rc::Rc;

use crate::diagnostics::{Diagnostic, Kind};
pub use crate::source::{SourceFile, SourceId, Span};

/// A spanned S-expression.
#[derive(Clone, Debug)]
pub(crate) struct Sexp {
    pub kind: SexpKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) enum SexpKind {
    List(Vec<Sexp>),
    /// Shared with Rhai's `Sym`: a form made by staging and a form read from text hold their
    /// names alike, and moving a name between the two copies nothing.
    Symbol(Rc<str>),
    /// Wide enough to tell "too large for int64" from a valid literal.
    Int(i128),
    Float(f64),
    Bool(bool),
    /// The string's bytes (its UTF-8 encoding, escapes applied).
    Str(Vec<u8>),
    Keyword(String),
    Quasiquote(Box<Sexp>),
    Unquote(Box<Sexp>),
    UnquoteSplicing(Box<Sexp>),
}

impl Sexp {
    pub fn symbol(&self) -> Option<&str> {
        match &self.kind {
            SexpKind::Symbol(name) => Some(name),
            _ => None,
        }
    }

    pub fn list(&self) -> Option<&[Sexp]> {
        match &self.kind {
            SexpKind::List(items) => Some(items),
            _ => None,
        }
    }

    /// The head symbol of a non-empty list.
    pub fn head(&self) -> Option<&str> {
        self.list().and_then(|items| items.first()).and_then(Sexp::symbol)
    }
}

impl std::fmt::Display for Sexp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            SexpKind::List(items) => {
                f.write_str("(")?;
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str(")")
            }
            SexpKind::Symbol(name) => f.write_str(name),
            SexpKind::Int(value) => write!(f, "{value}"),
            SexpKind::Float(value) => f.write_str(&format_float_literal(*value)),
            SexpKind::Bool(value) => f.write_str(if *value { "#t" } else { "#f" }),
            SexpKind::Str(bytes) => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            SexpKind::Keyword(name) => write!(f, "#:{name}"),
            SexpKind::Quasiquote(inner) => write!(f, "`{inner}"),
            SexpKind::Unquote(inner) => write!(f, ",{inner}"),
            SexpKind::UnquoteSplicing(inner) => write!(f, ",@{inner}"),
        }
    }
}

/// A float as a literal that reads back to the same double.
pub(crate) fn format_float_literal(value: f64) -> String {
    if value.is_nan() {
        "+nan.0".into()
    } else if value.is_infinite() {
        if value > 0.0 {
            "+inf.0".into()
        } else {
            "-inf.0".into()
        }
    } else {
        format!("{value:?}")
    }
}

/// Whether the text so far forms whole forms, for line editors and `is_complete_request`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completeness {
    /// Every list and string is closed.
    Complete,
    /// Something is still open; `depth` lists are open (for indentation).
    Incomplete {
        /// How many lists are open at the end.
        depth: usize,
    },
    /// The text can never become valid by appending (e.g. a stray `)`).
    Invalid,
}

/// Moves a form read from a piece of text to where that piece starts in its source.
pub(crate) fn shift_spans(form: &mut Sexp, by: u32) {
    form.span.start += by;
    form.span.end += by;
    match &mut form.kind {
        SexpKind::List(items) => items.iter_mut().for_each(|item| shift_spans(item, by)),
        SexpKind::Quasiquote(inner) | SexpKind::Unquote(inner) | SexpKind::UnquoteSplicing(inner) => {
            shift_spans(inner, by)
        }
        _ => {}
    }
}

/// Whether two forms are the same, spans included (floats by their bits).
pub(crate) fn same_form(a: &Sexp, b: &Sexp) -> bool {
    a.span == b.span
        && match (&a.kind, &b.kind) {
            (SexpKind::List(a), SexpKind::List(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_form(a, b))
            }
            (SexpKind::Symbol(a), SexpKind::Symbol(b)) => a == b,
            (SexpKind::Keyword(a), SexpKind::Keyword(b)) => a == b,
            (SexpKind::Int(a), SexpKind::Int(b)) => a == b,
            (SexpKind::Float(a), SexpKind::Float(b)) => a.to_bits() == b.to_bits(),
            (SexpKind::Bool(a), SexpKind::Bool(b)) => a == b,
            (SexpKind::Str(a), SexpKind::Str(b)) => a == b,
            (SexpKind::Quasiquote(a), SexpKind::Quasiquote(b))
            | (SexpKind::Unquote(a), SexpKind::Unquote(b))
            | (SexpKind::UnquoteSplicing(a), SexpKind::UnquoteSplicing(b)) => same_form(a, b),
            _ => false,
        }
}

/// Reads every form of a text.
pub(crate) fn read(source: SourceId, text: &str) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
    read_forms(source, text, false)
}

/// Reads forms for Rhai's `parse`: a symbol may end in `#` (an auto-gensym in a template).
pub(crate) fn read_template(source: SourceId, text: &str) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
    read_forms(source, text, true)
}

fn read_forms(source: SourceId, text: &str, allow_trailing_hash: bool) -> Result<Vec<Sexp>, Vec<Diagnostic>> {
    let mut reader =
        Reader { source, text, bytes: text.as_bytes(), position: 0, open: Vec::new(), nesting: 0, allow_trailing_hash };
    let mut forms = Vec::new();
    loop {
        match reader.next_form() {
            Ok(Some(form)) => forms.push(form),
            Ok(None) => return Ok(forms),
            Err(error) => return Err(vec![error.diagnostic]),
        }
    }
}

/// Decides whether a cell's text is complete, using the same lexer as `read`.
pub fn completeness(text: &str) -> Completeness {
    let trimmed = text.trim_start();
    if trimmed.starts_with(':') {
        return Completeness::Complete;
    }
    let mut reader = Reader {
        source: SourceId(0),
        text,
        bytes: text.as_bytes(),
        position: 0,
        open: Vec::new(),
        nesting: 0,
        allow_trailing_hash: false,
    };
    loop {
        match reader.next_form() {
            Ok(Some(_)) => continue,
            Ok(None) => return Completeness::Complete,
            Err(error) if error.at_end => {
                return Completeness::Incomplete { depth: reader.open.len().max(1) };
            }
            Err(_) => return Completeness::Invalid,
        }
    }
}

struct ReadError {
    diagnostic: Diagnostic,
    /// The input ended too early: more text could complete it.
    at_end: bool,
}

struct Reader<'a> {
    source: SourceId,
    text: &'a str,
    bytes: &'a [u8],
    position: usize,
    /// Byte offsets of the brackets still open, innermost last.
    open: Vec<usize>,
    /// Lists, prefixes (`` ` `` `,` `,@`) and `#;` comments being read, innermost last: the
    /// reader recurses into each (see `MAX_NESTING`).
    nesting: usize,
    allow_trailing_hash: bool,
}

/// How deeply lists, prefixes and datum comments may nest in one text: the reader recurses into
/// each, and no input may exhaust the stack (8,000 backquotes in a row once did).
const MAX_NESTING: usize = 1000;

fn is_delimiter(byte: u8) -> bool {
    byte.is_ascii_whitespace() || matches!(byte, b'(' | b')' | b'[' | b']' | b'"' | b';' | b'`' | b',')
}

fn is_symbol_char(character: char) -> bool {
    character.is_alphanumeric() || !character.is_ascii() || "!$%&*+-./:<=>?@^_~".contains(character)
}

impl<'a> Reader<'a> {
    fn span(&self, start: usize, end: usize) -> Span {
        Span::new(self.source, start, end)
    }

    fn error(&self, start: usize, end: usize, message: impl Into<String>) -> ReadError {
        let end = end.max(start + 1).min(self.bytes.len().max(start + 1));
        ReadError {
            diagnostic: Diagnostic::error(Kind::Syntax, message).with_label(self.span(start, end), ""),
            at_end: false,
        }
    }

    /// Enters a construct the reader recurses into, or fails with `error[limit]` at `MAX_NESTING`.
    fn enter(&mut self, start: usize, length: usize) -> Result<(), ReadError> {
        if self.nesting >= MAX_NESTING {
            let mut error =
                self.error(start, start + length, format!("forms nest deeper than {MAX_NESTING} levels here"));
            error.diagnostic.kind = Kind::Limit;
            return Err(error);
        }
        self.nesting += 1;
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.position).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<u8> {
        self.bytes.get(self.position + offset).copied()
    }

    /// Skips whitespace and all three kinds of comment.
    fn skip_atmosphere(&mut self) -> Result<(), ReadError> {
        loop {
            match self.peek() {
                Some(byte) if byte.is_ascii_whitespace() => self.position += 1,
                Some(b';') => {
                    while let Some(byte) = self.peek() {
                        if byte == b'\n' {
                            break;
                        }
                        self.position += 1;
                    }
                }
                Some(b'#') if self.peek_at(1) == Some(b'|') => self.skip_block_comment()?,
                Some(b'#') if self.peek_at(1) == Some(b';') => {
                    let start = self.position;
                    self.enter(start, 2)?;
                    self.position += 2;
                    let commented = self.next_form()?;
                    self.nesting -= 1;
                    if commented.is_none() {
                        let mut error = self.error(start, start + 2, "`#;` must be followed by a form to comment out");
                        error.at_end = true;
                        return Err(error);
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn skip_block_comment(&mut self) -> Result<(), ReadError> {
        let start = self.position;
        self.position += 2;
        let mut depth = 1;
        while depth > 0 {
            match (self.peek(), self.peek_at(1)) {
                (Some(b'|'), Some(b'#')) => {
                    depth -= 1;
                    self.position += 2;
                }
                (Some(b'#'), Some(b'|')) => {
                    depth += 1;
                    self.position += 2;
                }
                (Some(_), _) => self.position += 1,
                (None, _) => {
                    let mut error = self.error(start, start + 2, "this block comment is never closed");
                    error.diagnostic =
                        error.diagnostic.with_note("the cell ends inside this comment; close it with `|#`");
                    error.at_end = true;
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// The next form, or `None` at the end of the text.
    fn next_form(&mut self) -> Result<Option<Sexp>, ReadError> {
        self.skip_atmosphere()?;
        let start = self.position;
        let Some(byte) = self.peek() else { return Ok(None) };
        match byte {
            b'(' | b'[' => self.read_list(byte).map(Some),
            b')' | b']' => {
                Err(self.error(start, start + 1, format!("unexpected `{}`: no list is open here", byte as char)))
            }
            b'"' => self.read_string().map(Some),
            b'`' | b',' => self.read_prefixed().map(Some),
            b'\'' => Err(self
                .error(start, start + 1, "`'` (quote) is not part of C-Lisp")
                .with_note("C-Lisp code is already quasiquoted; use `` ` `` to pass a template to Rhai")),
            b'|' => Err(self.error(start, start + 1, "`|` is not allowed in C-Lisp symbols")),
            b'#' => self.read_hash().map(Some),
            _ => self.read_atom().map(Some),
        }
    }

    fn read_list(&mut self, opener: u8) -> Result<Sexp, ReadError> {
        let start = self.position;
        self.enter(start, 1)?;
        let closer = if opener == b'(' { b')' } else { b']' };
        self.position += 1;
        self.open.push(start);
        let mut items = Vec::new();
        loop {
            self.skip_atmosphere()?;
            match self.peek() {
                None => {
                    let mut error = self.error(start, start + 1, "this list is never closed");
                    error.diagnostic = error.diagnostic.with_note("the cell ends inside this list");
                    error.at_end = true;
                    return Err(error);
                }
                Some(byte) if byte == closer => {
                    self.position += 1;
                    self.open.pop();
                    self.nesting -= 1;
                    return Ok(Sexp { kind: SexpKind::List(items), span: self.span(start, self.position) });
                }
                Some(byte @ (b')' | b']')) => {
                    let here = self.position;
                    return Err(self
                        .error(
                            here,
                            here + 1,
                            format!("expected `{}` to close the list, found `{}`", closer as char, byte as char),
                        )
                        .with_secondary(self.span(start, start + 1), "the list opened here"));
                }
                Some(_) => match self.next_form()? {
                    Some(form) => items.push(form),
                    None => unreachable_end(),
                },
            }
        }
    }

    fn read_prefixed(&mut self) -> Result<Sexp, ReadError> {
        let start = self.position;
        let (length, name) = match (self.peek(), self.peek_at(1)) {
            (Some(b'`'), _) => (1, "quasiquote"),
            (Some(b','), Some(b'@')) => (2, "unquote-splicing"),
            _ => (1, "unquote"),
        };
        self.position += length;
        // A prefix binds to the form right after it; whitespace in between is not allowed,
        // so `, x` is an error rather than a silent unquote of `x`.
        if self.peek().is_none_or(|byte| byte.is_ascii_whitespace()) {
            let mut error = self.error(
                start,
                start + length,
                format!("`{}` ({name}) must be followed directly by a form", &self.text[start..start + length]),
            );
            error.at_end = self.peek().is_none();
            return Err(error);
        }
        self.enter(start, length)?;
        let inner = self.next_form()?;
        self.nesting -= 1;
        let Some(inner) = inner else {
            let mut error = self.error(start, start + length, format!("`{name}` at the end of the input"));
            error.at_end = true;
            return Err(error);
        };
        let span = self.span(start, inner.span.end as usize);
        let inner = Box::new(inner);
        let kind = match name {
            "quasiquote" => SexpKind::Quasiquote(inner),
            "unquote" => SexpKind::Unquote(inner),
            _ => SexpKind::UnquoteSplicing(inner),
        };
        Ok(Sexp { kind, span })
    }

    fn read_string(&mut self) -> Result<Sexp, ReadError> {
        let start = self.position;
        self.position += 1;
        let mut bytes = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                let mut error = self.error(start, start + 1, "this string is never closed");
                error.diagnostic = error.diagnostic.with_note("the cell ends inside this string");
                error.at_end = true;
                return Err(error);
            };
            match byte {
                b'"' => {
                    self.position += 1;
                    return Ok(Sexp { kind: SexpKind::Str(bytes), span: self.span(start, self.position) });
                }
                b'\\' => self.read_escape(&mut bytes)?,
                _ => {
                    bytes.push(byte);
                    self.position += 1;
                }
            }
        }
    }

    fn read_escape(&mut self, bytes: &mut Vec<u8>) -> Result<(), ReadError> {
        let escape_start = self.position;
        self.position += 1;
        let Some(byte) = self.peek() else { return Ok(()) };
        self.position += 1;
        match byte {
            b'n' => bytes.push(b'\n'),
            b't' => bytes.push(b'\t'),
            b'r' => bytes.push(b'\r'),
            b'0' => bytes.push(0),
            b'a' => bytes.push(7),
            b'\\' => bytes.push(b'\\'),
            b'"' => bytes.push(b'"'),
            b'\n' => {
                // Backslash-newline joins lines and drops the next line's indentation.
                while matches!(self.peek(), Some(b' ' | b'\t')) {
                    self.position += 1;
                }
            }
            b'x' => {
                let digits_start = self.position;
                while self.peek().is_some_and(|byte| byte.is_ascii_hexdigit()) {
                    self.position += 1;
                }
                let digits = &self.text[digits_start..self.position];
                if self.peek() != Some(b';') || digits.is_empty() {
                    return Err(self.error(
                        escape_start,
                        self.position,
                        "a `\\x` escape is hex digits ended by `;`, like `\\x41;`",
                    ));
                }
                self.position += 1;
                let code = u32::from_str_radix(digits, 16).ok().and_then(char::from_u32);
                let Some(character) = code else {
                    return Err(self.error(
                        escape_start,
                        self.position,
                        format!("`\\x{digits};` is not a Unicode code point"),
                    ));
                };
                let mut buffer = [0; 4];
                bytes.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
            }
            _ => {
                let end = escape_start + 1 + self.text[escape_start + 1..].chars().next().map_or(1, char::len_utf8);
                return Err(self
                    .error(escape_start, end, format!("unknown escape `{}` in a string", &self.text[escape_start..end]))
                    .with_note("escapes are \\n \\t \\r \\0 \\a \\\\ \\\" and \\xHH;"));
            }
        }
        Ok(())
    }

    fn token_end(&self, from: usize) -> usize {
        let mut end = from;
        while end < self.bytes.len() && !is_delimiter(self.bytes[end]) {
            end += 1;
        }
        end
    }

    fn read_hash(&mut self) -> Result<Sexp, ReadError> {
        let start = self.position;
        let end = self.token_end(start);
        let token = &self.text[start..end];
        self.position = end;
        let span = self.span(start, end);
        let kind = match token {
            "#t" | "#true" => SexpKind::Bool(true),
            "#f" | "#false" => SexpKind::Bool(false),
            _ if token.starts_with("#:") && token.len() > 2 => SexpKind::Keyword(token[2..].to_string()),
            _ if token.starts_with("#\\") => {
                return Err(self
                    .error(start, end, "character literals are not part of C-Lisp")
                    .with_note("write the code as an integer, e.g. 65 for `A`"));
            }
            _ => match radix_number(token) {
                Some(Ok(value)) => SexpKind::Int(value),
                Some(Err(message)) => return Err(self.error(start, end, message)),
                None => return Err(self.error(start, end, format!("`{token}` is not a valid literal")).with_note(
                    "`#` starts #t, #f, #:keyword and radix numbers like #x1f; it is reserved for gensyms in symbols",
                )),
            },
        };
        Ok(Sexp { kind, span })
    }

    fn read_atom(&mut self) -> Result<Sexp, ReadError> {
        let start = self.position;
        let end = self.token_end(start);
        let token = &self.text[start..end];
        self.position = end;
        let span = self.span(start, end);
        if let Some(kind) = number(token) {
            return match kind {
                Ok(kind) => Ok(Sexp { kind, span }),
                Err(message) => Err(self.error(start, end, message)),
            };
        }
        let checked = if self.allow_trailing_hash {
            token.strip_suffix('#').filter(|stem| !stem.is_empty()).unwrap_or(token)
        } else {
            token
        };
        if let Some((offset, character)) = checked.char_indices().find(|&(_, character)| !is_symbol_char(character)) {
            let at = start + offset;
            let message = if character == '#' {
                "`#` may not occur in a symbol: it is reserved for gensyms".to_string()
            } else {
                format!("unexpected character `{character}`")
            };
            return Err(self.error(at, at + character.len_utf8(), message));
        }
        Ok(Sexp { kind: SexpKind::Symbol(token.into()), span })
    }
}

/// Whether `text` reads as exactly one symbol (no `#`, not a number).
pub(crate) fn is_symbol(text: &str) -> bool {
    !text.is_empty() && !text.bytes().any(is_delimiter) && number(text).is_none() && text.chars().all(is_symbol_char)
}

fn unreachable_end() -> ! {
    // `next_form` only returns `None` at the end of the text, which the caller checked.
    panic!("reader: form expected after a non-delimiter byte")
}

impl ReadError {
    fn with_note(mut self, note: impl Into<String>) -> ReadError {
        self.diagnostic = self.diagnostic.with_note(note);
        self
    }

    fn with_secondary(mut self, span: Span, message: &str) -> ReadError {
        self.diagnostic = self.diagnostic.with_secondary(span, message);
        self
    }
}

/// Reads a token as a number, or `None` if it is a symbol.
fn number(token: &str) -> Option<Result<SexpKind, String>> {
    match token {
        "+inf.0" => return Some(Ok(SexpKind::Float(f64::INFINITY))),
        "-inf.0" => return Some(Ok(SexpKind::Float(f64::NEG_INFINITY))),
        "+nan.0" | "-nan.0" => return Some(Ok(SexpKind::Float(f64::NAN))),
        _ => {}
    }
    let (sign, digits) = match token.as_bytes().first() {
        Some(b'+') => (1, &token[1..]),
        Some(b'-') => (-1, &token[1..]),
        _ => (1, token),
    };
    if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        if !hex.is_empty() && hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Some(parse_integer(hex, 16, sign, token));
        }
        return None;
    }
    if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Some(parse_integer(digits, 10, sign, token));
    }
    if is_float_syntax(digits) {
        return Some(match token.parse::<f64>() {
            Ok(value) if value.is_infinite() => {
                Err(format!("float literal `{token}` is too large for a double (write +inf.0 for infinity)"))
            }
            Ok(value) => Ok(SexpKind::Float(value)),
            Err(error) => Err(format!("bad float literal `{token}`: {error}")),
        });
    }
    None
}

fn parse_integer(digits: &str, radix: u32, sign: i128, token: &str) -> Result<SexpKind, String> {
    match i128::from_str_radix(digits, radix) {
        // Anything an i128 holds reads; the checker says which type (if any) fits it.
        Ok(value) => Ok(SexpKind::Int(sign * value)),
        _ => Err(format!("integer literal `{token}` is too large")),
    }
}

/// `D+ "." D* | "." D+` with an optional exponent, or `D+` with a required exponent.
fn is_float_syntax(text: &str) -> bool {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let exponent_ok = match exponent {
        None => true,
        Some(exponent) => {
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
        }
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => {
            (!whole.is_empty() || !fraction.is_empty())
                && whole.bytes().all(|byte| byte.is_ascii_digit())
                && fraction.bytes().all(|byte| byte.is_ascii_digit())
        }
        None => exponent.is_some() && !mantissa.is_empty() && mantissa.bytes().all(|byte| byte.is_ascii_digit()),
    };
    exponent_ok && mantissa_ok
}

/// Guile's radix prefixes `#x #o #b #d`.
fn radix_number(token: &str) -> Option<Result<i128, String>> {
    let radix = match token.get(..2) {
        Some("#x" | "#X") => 16,
        Some("#o" | "#O") => 8,
        Some("#b" | "#B") => 2,
        Some("#d" | "#D") => 10,
        _ => return None,
    };
    let rest = &token[2..];
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'+') => (1, &rest[1..]),
        Some(b'-') => (-1, &rest[1..]),
        _ => (1, rest),
    };
    if digits.is_empty() || !digits.chars().all(|character| character.is_digit(radix)) {
        return Some(Err(format!("`{token}` is not a valid base-{radix} integer")));
    }
    Some(match parse_integer(digits, radix, sign, token) {
        Ok(SexpKind::Int(value)) => Ok(value),
        Ok(_) => Err(format!("`{token}` is not an integer")),
        Err(message) => Err(message),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{expect, Expect};

    fn check(input: &str, expected: Expect) {
        let actual = match read(SourceId(0), input) {
            Ok(forms) => forms
                .iter()
                .map(|form| format!("{form} @{}..{}", form.span.start, form.span.end))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(diagnostics) => diagnostics
                .iter()
                .map(|diagnostic| {
                    format!(
                        "{:?}: {} @{:?}",
                        diagnostic.kind,
                        diagnostic.message,
                        diagnostic.labels.first().map(|label| (label.span.start, label.span.end))
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
        };
        expected.assert_eq(&actual);
    }

    #[test]
    fn atoms_and_lists() {
        check(
            "(add x 1) [tid.x] 12-idx -3 2.5 .5 1e3 #t #:key \"a\\nb\" 0x1F #x-10 +inf.0 ...",
            expect![[r#"
            (add x 1) @0..9
            (tid.x) @10..17
            12-idx @18..24
            -3 @25..27
            2.5 @28..31
            0.5 @32..34
            1000.0 @35..38
            #t @39..41
            #:key @42..47
            "a\nb" @48..54
            31 @55..59
            -16 @60..65
            +inf.0 @66..72
            ... @73..76"#]],
        );
    }

    #[test]
    fn comments_and_quasiquote() {
        check("; line\n#| block #| nested |# |# #;(dropped form) `(a ,b ,@c)", expect![[r#"`(a ,b ,@c) @49..60"#]]);
    }

    #[test]
    fn errors() {
        check("(define ((sq int) (x int))", expect![[r#"Syntax: this list is never closed @Some((0, 1))"#]]);
        check("(a))", expect![[r#"Syntax: unexpected `)`: no list is open here @Some((3, 4))"#]]);
        check("(a]", expect![[r#"Syntax: expected `)` to close the list, found `]` @Some((2, 3))"#]]);
        check("'x", expect![[r#"Syntax: `'` (quote) is not part of C-Lisp @Some((0, 1))"#]]);
        check("a#b", expect![[r#"Syntax: `#` may not occur in a symbol: it is reserved for gensyms @Some((1, 2))"#]]);
        check("\"a\\q\"", expect![[r#"Syntax: unknown escape `\q` in a string @Some((2, 4))"#]]);
        check("99999999999999999999999", expect!["99999999999999999999999 @0..23"]);
    }

    #[test]
    fn completeness_of_input() {
        assert_eq!(completeness("(define ((f int))\n  (ret"), Completeness::Incomplete { depth: 2 });
        assert_eq!(completeness("(f) (g)"), Completeness::Complete);
        assert_eq!(completeness("\"abc"), Completeness::Incomplete { depth: 1 });
        assert_eq!(completeness("(f))"), Completeness::Invalid);
        assert_eq!(completeness(":help"), Completeness::Complete);
    }

    #[test]
    fn every_kind_of_nesting_is_bounded() {
        // On a stack the size of a terminal's main thread (8 MiB; the kernel's session thread has
        // 64 MiB), not the test harness's 2 MiB.
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(nesting_is_bounded)
            .expect("a thread")
            .join()
            .expect("no overflow");
    }

    fn nesting_is_bounded() {
        // Each of these once recursed once per character, and 8,000 of them overflowed the stack.
        for prefix in ["`", ",", ",@", "#;", "(", "["] {
            let text = format!("{}x", prefix.repeat(20_000));
            let errors = read(SourceId(0), &text).expect_err(prefix);
            assert_eq!(errors[0].kind, Kind::Limit, "{prefix}");
            assert!(errors[0].message.contains("nest deeper than 1000"), "{prefix}: {}", errors[0].message);
        }
        let within = format!("{}x", "`".repeat(999));
        assert!(read(SourceId(0), &within).is_ok());
        assert!(matches!(completeness(&"`".repeat(20_000)), Completeness::Invalid | Completeness::Incomplete { .. }));
    }
}
