//! A forgiving tree of a cell's text, only for mutating it: lists, prefixes and atoms, comments
//! dropped. It reads anything (an unclosed list closes at the end, a stray closer is dropped),
//! because its inputs are already mutated; the real reader is what the fuzzer tests.

/// One form of a cell, as the mutator sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A symbol, number, string (quotes and escapes kept) or `#…` token, verbatim.
    Atom(String),
    /// `( … )` or `[ … ]`.
    List { square: bool, items: Vec<Node> },
    /// `` ` ``, `,` or `,@` before a form.
    Prefix(&'static str, Box<Node>),
}

/// The forms of a text.
pub fn parse(text: &str) -> Vec<Node> {
    let mut parser = Parser { chars: text.chars().collect(), position: 0 };
    let mut forms = Vec::new();
    while let Some(node) = parser.node(0) {
        forms.push(node);
    }
    forms
}

/// Forms as text, one space between them.
pub fn print(forms: &[Node]) -> String {
    let mut text = String::new();
    for (index, node) in forms.iter().enumerate() {
        if index > 0 {
            text.push(' ');
        }
        print_node(node, &mut text);
    }
    text
}

fn print_node(node: &Node, text: &mut String) {
    match node {
        Node::Atom(atom) => text.push_str(atom),
        Node::List { square, items } => {
            text.push(if *square { '[' } else { '(' });
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    text.push(' ');
                }
                print_node(item, text);
            }
            text.push(if *square { ']' } else { ')' });
        }
        Node::Prefix(prefix, inner) => {
            text.push_str(prefix);
            print_node(inner, text);
        }
    }
}

/// Nesting deeper than this is kept flat: the mutator must not overflow its own stack on the
/// deeply nested inputs it makes.
const MAX_DEPTH: usize = 200;

struct Parser {
    chars: Vec<char>,
    position: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.position).copied()
    }

    fn skip_blanks_and_comments(&mut self) {
        while let Some(character) = self.peek() {
            if character.is_whitespace() {
                self.position += 1;
            } else if character == ';' {
                while self.peek().is_some_and(|character| character != '\n') {
                    self.position += 1;
                }
            } else if character == '#' && self.chars.get(self.position + 1) == Some(&'|') {
                self.position += 2;
                while self.position < self.chars.len()
                    && !(self.chars[self.position] == '|' && self.chars.get(self.position + 1) == Some(&'#'))
                {
                    self.position += 1;
                }
                self.position = (self.position + 2).min(self.chars.len());
            } else {
                return;
            }
        }
    }

    /// The next form, or `None` at the end (or at a closer, which the caller takes).
    fn node(&mut self, depth: usize) -> Option<Node> {
        loop {
            self.skip_blanks_and_comments();
            let character = self.peek()?;
            match character {
                ')' | ']' if depth > 0 => return None,
                ')' | ']' => self.position += 1,
                '(' | '[' if depth < MAX_DEPTH => {
                    self.position += 1;
                    let mut items = Vec::new();
                    while let Some(item) = self.node(depth + 1) {
                        items.push(item);
                    }
                    if matches!(self.peek(), Some(')' | ']')) {
                        self.position += 1;
                    }
                    return Some(Node::List { square: character == '[', items });
                }
                '`' | ',' if depth < MAX_DEPTH => {
                    self.position += 1;
                    let prefix = if character == '`' {
                        "`"
                    } else if self.peek() == Some('@') {
                        self.position += 1;
                        ",@"
                    } else {
                        ","
                    };
                    let inner = self.node(depth + 1).unwrap_or(Node::Atom(String::new()));
                    return Some(Node::Prefix(prefix, Box::new(inner)));
                }
                '"' => return Some(Node::Atom(self.string())),
                _ => return Some(Node::Atom(self.atom())),
            }
        }
    }

    fn string(&mut self) -> String {
        let start = self.position;
        self.position += 1;
        while let Some(character) = self.peek() {
            self.position += 1;
            match character {
                '\\' => self.position = (self.position + 1).min(self.chars.len()),
                '"' => break,
                _ => {}
            }
        }
        self.chars[start..self.position].iter().collect()
    }

    fn atom(&mut self) -> String {
        let start = self.position;
        while let Some(character) = self.peek() {
            if character.is_whitespace() || "()[]\";`,".contains(character) {
                break;
            }
            self.position += 1;
        }
        if self.position == start {
            // A bracket or prefix past the depth bound: an atom, so that parsing moves on.
            self.position += 1;
        }
        self.chars[start..self.position].iter().collect()
    }
}

impl Node {
    /// How many nodes this tree holds, itself included.
    pub fn size(&self) -> usize {
        match self {
            Node::Atom(_) => 1,
            Node::List { items, .. } => 1 + items.iter().map(Node::size).sum::<usize>(),
            Node::Prefix(_, inner) => 1 + inner.size(),
        }
    }

    /// The node at preorder position `index` (0 is this one).
    pub fn nth_mut(&mut self, index: usize) -> Option<&mut Node> {
        if index == 0 {
            return Some(self);
        }
        let mut rest = index - 1;
        match self {
            Node::Atom(_) => None,
            Node::Prefix(_, inner) => inner.nth_mut(rest),
            Node::List { items, .. } => {
                for item in items {
                    let size = item.size();
                    if rest < size {
                        return item.nth_mut(rest);
                    }
                    rest -= size;
                }
                None
            }
        }
    }

    /// Every node of the tree, preorder, cloned (for pools of replacement forms).
    pub fn collect(&self, into: &mut Vec<Node>) {
        into.push(self.clone());
        match self {
            Node::Atom(_) => {}
            Node::Prefix(_, inner) => inner.collect(into),
            Node::List { items, .. } => items.iter().for_each(|item| item.collect(into)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, print};

    #[test]
    fn reads_and_prints_back() {
        let text = "(define ((f int) (x int)) ; comment\n  (ret `(add ,x ,@y \"a \\\" b\")))) [tid.x]";
        assert_eq!(print(&parse(text)), "(define ((f int) (x int)) (ret `(add ,x ,@y \"a \\\" b\"))) [tid.x]");
    }

    #[test]
    fn forgives_broken_text() {
        assert_eq!(print(&parse(")) (a (b")), "(a (b))");
        for deep in ["(".repeat(10_000), "`".repeat(10_000), ",@".repeat(10_000)] {
            assert!(!print(&parse(&deep)).is_empty());
        }
    }
}
