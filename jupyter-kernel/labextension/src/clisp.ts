// C-Lisp for CodeMirror 6: a stream tokenizer after docs/language.md §2 (lexical syntax) and
// §11 (grammar), with the form names of lang/src/check/mod.rs (`FORM_NAMES`) and the commands
// of lang/src/command.rs (`COMMANDS`). test/tokens.test.mjs checks the lists against those files.

import {
  HighlightStyle,
  LanguageSupport,
  StreamLanguage,
  StreamParser,
  StringStream,
  syntaxHighlighting
} from '@codemirror/language';
import { tags } from '@lezer/highlight';

/** Forms that define a name. */
export const DEFINITION_FORMS = [
  'define',
  'define-inline',
  'define-brilisp',
  'define-inline-brilisp',
  'define-struct',
  'define-global',
  'define-kernel',
  'define-shared',
  'declare',
  'declare-global'
];

/** Forms that change where control goes (Brilisp's `label`, `jmp`, `br` included). */
export const CONTROL_FORMS = ['if', 'while', 'for', 'ret', 'break', 'continue', 'label', 'jmp', 'br'];

/** The other statement and expression forms, and the wrappers of llama.lisp files. */
export const OTHER_FORMS = ['set', 'call', 'asm', 'launch', 'const', 'c-lisp', 'cuda-lisp'];

/** Forms the session runs rather than compiles: staging, benchmarks, C headers. */
export const SESSION_FORMS = ['rhai', 'rhai-file', 'load-library', 'include', 'bench', 'autotune'];

/** Opcodes, casts and builtins: the rest of `FORM_NAMES`, written as `(OP operand…)`. */
export const OPCODES = [
  'add', 'sub', 'mul', 'div', 'rem', 'udiv', 'urem', 'shl', 'lshr', 'ashr', 'xor', 'and', 'or', 'not',
  'fadd', 'fsub', 'fmul', 'fdiv', 'fneg',
  'eq', 'ne', 'lt', 'gt', 'le', 'ge', 'ult', 'ugt', 'ule', 'uge', 'feq', 'fne', 'flt', 'fgt', 'fle', 'fge',
  'select', 'load', 'store', 'ptradd', 'sptradd', 'aptradd', 'ptr-to', 'alloc', 'extractvalue', 'insertvalue',
  'sext', 'zext', 'trunc', 'fpext', 'fptrunc', 'sitofp', 'uitofp', 'fptosi', 'fptoui', 'ptrtoint', 'inttoptr',
  'bitcast', 'addrspacecast', 'nop', 'id',
  'gpu-alloc', 'gpu-free', 'gpu-len', 'gpu-copy',
  'tid.x', 'tid.y', 'tid.z', 'bid.x', 'bid.y', 'bid.z', 'bdim.x', 'bdim.y', 'bdim.z', 'gdim.x', 'gdim.y', 'gdim.z',
  'syncthreads', '__syncthreads'
];

/** Type names and the heads of type forms. */
export const TYPES = [
  'bool', 'int8', 'int16', 'int', 'int32', 'int64', 'float', 'double', 'void',
  'ptr', 'arr', 'struct', 'gpu-buf', 'addrspace'
];

/** Words that are keywords only inside one form: `(autotune … (gen …) (params …))`. */
export const CLAUSES = new Map<string, string[]>([
  ['autotune', ['gen', 'params', 'run', 'check', 'check-buffer', 'tolerance']],
  ['include', ['functions', 'structs', 'typedefs', 'flags']],
  ['launch', ['grid', 'block']]
]);

/** Lapis-style parameter annotations: `(a (ptr float) in n)`, `(h (ptr int8) handle)`. */
export const ANNOTATIONS = ['in', 'out', 'inout', 'handle'];

/** The `:` commands a cell may start with. */
export const COMMANDS = [
  'help', 'quit', 'reset', 'load', 'save', 'opt', 'defs', 'expand', 'limits', 'stages', 'types', 'ir', 'asm',
  'ptx', 'gpu-arch', 'time', 'bench'
];

// The style of each word at the head of a list. Token names are @lezer/highlight tags (a `.`
// adds a modifier), so the editor's theme colours them: JupyterLab's light and dark themes style
// `keyword`, `variableName.standard` (builtins) and the rest; `typeName` and `escape`, which they
// leave plain, get colours from `cLispHighlight` below.
const HEAD_STYLES = new Map<string, string>([
  ...DEFINITION_FORMS.map(word => [word, 'definitionKeyword'] as [string, string]),
  ...CONTROL_FORMS.map(word => [word, 'controlKeyword'] as [string, string]),
  ...OTHER_FORMS.map(word => [word, 'keyword'] as [string, string]),
  ...SESSION_FORMS.map(word => [word, 'keyword'] as [string, string]),
  ...OPCODES.map(word => [word, 'variableName.standard'] as [string, string])
]);
const TYPE_WORDS = new Set(TYPES);
const COMMAND_WORDS = new Set(COMMANDS.map(name => ':' + name));

/** Definition forms whose name sits in `((NAME TYPE) …)`: the list after the head. */
const PROTOTYPE_FORMS = new Set(['define', 'define-inline', 'define-brilisp', 'define-inline-brilisp', 'define-kernel']);
/** Definition forms whose name comes right after the head: `(define-struct NAME …)`. */
const NAMED_FORMS = new Set(['define-struct', 'define-shared', 'declare', 'declare-global']);

/** What a list is, as far as colouring its items goes. */
type Role = 'plain' | 'prototype' | 'signature' | 'parameter' | 'unquote';

/** One open list: its head word (once read), how many items it has so far, its role. */
interface Frame {
  head: string | null;
  count: number;
  role: Role;
}

/** The tokenizer's state between tokens and lines. */
export interface State {
  frames: Frame[];
  /** Nesting depth of `#| … |#` comments. */
  blockComment: number;
  /** Inside a string that runs on from an earlier token: its style. */
  string: string | null;
  /** A `,` or `,@` was read: the next datum names Rhai. */
  unquote: boolean;
  /** `#;` was read: the next datum is a comment. */
  datumCommentPending: boolean;
  /** The frame depth a commented-out list opened at, or -1: deeper tokens are a comment. */
  datumCommentDepth: number;
  /** Only whitespace so far on this line: a `:command` may start here. */
  lineStart: boolean;
}

const ATOM = /^[^\s()[\]";`,]+/;
const NUMBER = [
  /^[+-]?\d+$/,
  /^[+-]?0[xX][0-9a-fA-F]+$/,
  /^#[xX][+-]?[0-9a-fA-F]+$/,
  /^#[oO][+-]?[0-7]+$/,
  /^#[bB][+-]?[01]+$/,
  /^#[dD][+-]?\d+$/,
  /^[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?$/,
  /^[+-]?\d+[eE][+-]?\d+$/,
  /^[+-](inf|nan)\.0$/
];
const BOOLEAN = /^#(t|f|true|false)$/;

function isNumber(word: string): boolean {
  return NUMBER.some(pattern => pattern.test(word));
}

function top(state: State): Frame | undefined {
  return state.frames[state.frames.length - 1];
}

/** The role of a list opened as the next item of `parent`. */
function roleOf(parent: Frame | undefined): Role {
  if (!parent) {
    return 'plain';
  }
  if (parent.head !== null && PROTOTYPE_FORMS.has(parent.head) && parent.count === 1) {
    return 'prototype';
  }
  if ((parent.role === 'prototype' && parent.count === 0) || (parent.head === 'define-global' && parent.count === 1)) {
    return 'signature';
  }
  if (parent.role === 'prototype') {
    return 'parameter';
  }
  return 'plain';
}

/** The style of a word that is not a number, in its place. */
function wordStyle(word: string, frame: Frame | undefined, parent: Frame | undefined): string | null {
  if (TYPE_WORDS.has(word)) {
    return 'typeName';
  }
  if (!frame) {
    return null;
  }
  if (frame.count === 0) {
    if (frame.role === 'signature') {
      return 'variableName.definition';
    }
    if (parent?.head && CLAUSES.get(parent.head)?.includes(word)) {
      return 'keyword';
    }
    return HEAD_STYLES.get(word) ?? null;
  }
  if (frame.count === 1 && frame.head !== null && NAMED_FORMS.has(frame.head)) {
    return 'variableName.definition';
  }
  if (frame.count === 2 && frame.role === 'parameter' && ANNOTATIONS.includes(word)) {
    return 'keyword';
  }
  return null;
}

/** Counts a datum that starts here as an item of the enclosing list. */
function countDatum(state: State, head: string | null): void {
  const frame = top(state);
  if (frame) {
    if (frame.count === 0) {
      frame.head = head;
    }
    frame.count += 1;
  }
}

/** The rest of a string, one piece a token: escapes apart, so they can be coloured. */
function stringPiece(stream: StringStream, state: State, style: string): string {
  if (!stream.eat('\\')) {
    stringText(stream, state);
    return style;
  }
  if (stream.eat('x')) {
    stream.match(/^[0-9a-fA-F]*;?/);
  } else {
    stream.next(); // nothing at the end of a line: a backslash-newline joins the lines
  }
  return 'escape';
}

/** Reads a string's text up to an escape, its closing quote (which ends it) or the line's end. */
function stringText(stream: StringStream, state: State): void {
  while (!stream.eol() && stream.peek() !== '\\') {
    if (stream.next() === '"') {
      state.string = null;
      return;
    }
  }
}

function blockCommentPiece(stream: StringStream, state: State): string {
  while (!stream.eol() && state.blockComment > 0) {
    if (stream.match('|#')) {
      state.blockComment -= 1;
    } else if (stream.match('#|')) {
      state.blockComment += 1;
    } else {
      stream.next();
    }
  }
  return 'blockComment';
}

/** Reads one token; returns its style and whether it started a datum (an item of a list). */
function lex(stream: StringStream, state: State): [string | null, boolean] {
  if (state.blockComment > 0) {
    return [blockCommentPiece(stream, state), false];
  }
  if (state.string !== null) {
    return [stringPiece(stream, state, state.string), false];
  }
  const next = stream.peek() ?? '';
  if (stream.match(';')) {
    stream.skipToEnd();
    return ['lineComment', false];
  }
  if (stream.match('#|')) {
    state.blockComment = 1;
    return [blockCommentPiece(stream, state), false];
  }
  if (stream.match('#;')) {
    state.datumCommentPending = true;
    return ['comment', false];
  }
  if (next === '(' || next === '[') {
    stream.next();
    const parent = top(state);
    const role = state.unquote ? 'unquote' : roleOf(parent);
    countDatum(state, null);
    state.frames.push({ head: null, count: 0, role });
    return [next === '(' ? 'paren' : 'squareBracket', true];
  }
  if (next === ')' || next === ']') {
    stream.next();
    state.frames.pop();
    return [next === ')' ? 'paren' : 'squareBracket', false];
  }
  if (stream.match(',@') || stream.eat(',')) {
    state.unquote = true;
    return ['operator', false];
  }
  if (stream.eat('`')) {
    return ['operator', false];
  }
  if (stream.eat('"')) {
    const frame = top(state);
    const rhai = frame !== undefined && frame.head === 'rhai' && frame.count === 1;
    const style = rhai ? 'string.special' : 'string';
    countDatum(state, null);
    state.string = style;
    stringText(stream, state);
    return [style, true];
  }
  const word = (stream.match(ATOM) as RegExpMatchArray | null)?.[0];
  if (!word) {
    stream.next(); // not reached: every other character starts an atom
    return [null, false];
  }
  return [atomStyle(word, state), true];
}

function atomStyle(word: string, state: State): string | null {
  const frame = top(state);
  const parent = state.frames[state.frames.length - 2];
  const unquoted = state.unquote || (frame?.role === 'unquote' && frame.count === 0);
  const style = unquoted ? 'variableName.special' : wordStyle(word, frame, parent); // a Rhai name
  countDatum(state, word);
  if (isNumber(word)) {
    return 'number';
  }
  if (BOOLEAN.test(word)) {
    return 'bool';
  }
  if (word.startsWith('#:')) {
    return 'atom'; // a keyword argument of a Rhai call
  }
  if (word.startsWith('#')) {
    return 'invalid'; // `#` is reserved for gensyms; `#\a` is not C-Lisp
  }
  if (state.lineStart && !frame && COMMAND_WORDS.has(word)) {
    return 'meta';
  }
  return style;
}

export const cLisp: StreamParser<State> = {
  name: 'c-lisp',

  startState: (): State => ({
    frames: [],
    blockComment: 0,
    string: null,
    unquote: false,
    datumCommentPending: false,
    datumCommentDepth: -1,
    lineStart: true
  }),

  copyState: (state: State): State => ({ ...state, frames: state.frames.map(frame => ({ ...frame })) }),

  token(stream: StringStream, state: State): string | null {
    if (stream.sol()) {
      state.lineStart = true;
    }
    if (state.blockComment === 0 && state.string === null && stream.eatSpace()) {
      return null;
    }
    const depth = state.frames.length;
    const commented = state.datumCommentPending || state.datumCommentDepth >= 0;
    const pending = state.datumCommentPending;
    const [style, datum] = lex(stream, state);
    state.lineStart = false;
    if (datum) {
      state.unquote = false;
      if (pending) {
        state.datumCommentPending = false;
        if (state.string !== null) {
          state.string = 'comment'; // the rest of a commented-out string too
        }
        if (state.frames.length > depth) {
          state.datumCommentDepth = depth;
        }
      }
    }
    if (state.datumCommentDepth >= 0 && state.frames.length <= state.datumCommentDepth) {
      state.datumCommentDepth = -1;
    }
    return commented ? 'comment' : style;
  },

  languageData: {
    commentTokens: { line: ';', block: { open: '#|', close: '|#' } },
    closeBrackets: { brackets: ['(', '[', '"'] }
  }
};

/** C-Lisp as a CodeMirror language. */
export const cLispLanguage = StreamLanguage.define(cLisp);

// JupyterLab's highlight style (@jupyterlab/codemirror's theme) has no rule for type names or
// string escapes; these take colours of its theme variables, so light and dark themes both work.
const cLispHighlight = HighlightStyle.define(
  [
    { tag: tags.typeName, color: 'var(--jp-mirror-editor-atom-color, #88f)' },
    { tag: tags.escape, color: 'var(--jp-mirror-editor-string-color, #ba2121)', fontWeight: 'bold' }
  ],
  { scope: cLispLanguage }
);

/** The language with its highlighting, for an editor or a language registry. */
export function cLispSupport(): LanguageSupport {
  return new LanguageSupport(cLispLanguage, [syntaxHighlighting(cLispHighlight)]);
}
