//! Builds `MemoryEntry` objects straight from SQLite rows, without pydantic's validation.
//!
//! Twin of `build_entry` in `memlane/_pure/store.py`. A row memlane wrote itself is known to
//! be valid: its JSON came from `json.dumps`, its scope from the enum, its times from
//! `isoformat` and `timestamp`. Such a row becomes an entry the way `model_construct` makes
//! one (the object's `__dict__` and pydantic's three slots set directly), its JSON decoded
//! here into Python objects in one pass. Anything this fast path does not take for certain
//! (JSON outside the plain subset `json.dumps` writes, an unknown scope, a date
//! `fromisoformat` refuses, a negative version) is handed back as the row itself, and the
//! Python store decodes it with `row_to_entry`, which builds the same entry or raises the
//! precise `CorruptStoreError`. So the fast path changes no result, only the time.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyFrozenSet, PyList, PySet, PyString, PyTuple};
use rustc_hash::FxHashMap;

use crate::store::sqlite::{Packed, Row, RowRef};

/// The nine fields of `MemoryEntry`, in declaration order (the order of `model_construct`'s
/// `__dict__`); `memlane._core.ENTRY_FIELDS`, which a test holds equal to
/// `MemoryEntry.model_fields`.
pub const FIELDS: [&str; 9] = [
    "entry_id",
    "scope",
    "key",
    "content",
    "metadata",
    "created_at",
    "expires_at",
    "importance",
    "version",
];

/// JSON nested deeper than this is left to `json.loads` (Python's own recursion limit
/// decides there).
const MAX_DEPTH: usize = 200;

/// Batches longer than this are built with the cyclic GC paused (see `Kit::entries`).
const GC_PAUSE_ROWS: usize = 64;

/// Batches longer than this join the oldest generation once built (see `Kit::entries`).
const PROMOTE_ROWS: usize = 1000;

/// JSON strings up to this many bytes (object keys, tags, short values) are made once per
/// batch and shared by every entry that holds them: a `str` is immutable, so only identity
/// (`is`) can tell, and `json.loads` promises none across calls.
const SHARED_STRING_BYTES: usize = 32;

/// The most distinct strings one batch shares; later ones are made per occurrence.
const SHARED_STRINGS: usize = 4096;

/// Interned names, `object.__new__`, and what every entry starts from, made once.
struct Names {
    fields: [Py<PyString>; 9],
    object_new: Py<PyAny>,
    gc: Py<PyAny>,
    /// Every field, `None` where a row may leave it so (`key`, `expires_at`).
    template: Py<PyDict>,
    /// The fields given, all of them: each entry gets its own copy (`fields_set | empty`).
    fields_set: Py<PySet>,
    empty: Py<PyFrozenSet>,
}

static NAMES: PyOnceLock<Names> = PyOnceLock::new();

fn names(py: Python<'_>) -> PyResult<&Names> {
    NAMES.get_or_try_init(py, || {
        let fields = FIELDS.map(|s| PyString::intern(py, s).unbind());
        let template = PyDict::new(py);
        for field in &fields {
            template.set_item(field.bind(py), py.None())?;
        }
        let fields_set = PySet::new(py, fields.iter().map(|s| s.bind(py)))?.unbind();
        Ok::<_, PyErr>(Names {
            object_new: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__new__")?
                .unbind(),
            gc: py.import("gc")?.into_any().unbind(),
            template: template.unbind(),
            fields_set,
            empty: PyFrozenSet::empty(py)?.unbind(),
            fields,
        })
    })
}

/// The slots `model_construct` fills, in the order it fills them.
const SLOTS: [&str; 4] = [
    "__dict__",
    "__pydantic_fields_set__",
    "__pydantic_extra__",
    "__pydantic_private__",
];

/// `__set__` of each of `SLOTS`, found on `cls`'s MRO as `object.__setattr__` finds them.
/// Calling a slot's own setter does what `object.__setattr__(entry, name, value)` does
/// (these are data descriptors, so the lookup ends there) at half the cost: no lookup of
/// the name, no slicing of the arguments.
fn slot_setters<'py>(cls: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; 4]> {
    let mro = cls.getattr("__mro__")?;
    let find = |name: &str| -> PyResult<Bound<'py, PyAny>> {
        for klass in mro.try_iter()? {
            let namespace = klass?.getattr("__dict__")?;
            if namespace.contains(name)? {
                return namespace.get_item(name)?.getattr("__set__");
            }
        }
        Err(PyValueError::new_err(format!(
            "kit class has no {name} slot"
        )))
    };
    Ok([
        find(SLOTS[0])?,
        find(SLOTS[1])?,
        find(SLOTS[2])?,
        find(SLOTS[3])?,
    ])
}

/// The setters of the first class seen (the store's `MemoryEntry`), kept for later calls.
static SETTERS: PyOnceLock<(Py<PyAny>, [Py<PyAny>; 4])> = PyOnceLock::new();

/// What building needs from Python: `(MemoryEntry, {scope value: MemoryScope},
/// datetime.fromisoformat, datetime.fromtimestamp, UTC)`, the store's `ENTRY_KIT`.
pub struct Kit<'py> {
    cls: Bound<'py, PyAny>,
    /// The scopes by value, compared in Rust: a row's scope needs no `str` to be found.
    scopes: Vec<(String, Bound<'py, PyAny>)>,
    from_iso: Bound<'py, PyAny>,
    from_timestamp: Bound<'py, PyAny>,
    utc: Bound<'py, PyAny>,
    names: &'py Names,
    setters: [Bound<'py, PyAny>; 4],
}

/// What one batch shares between its entries: short strings (see `SHARED_STRING_BYTES`) and
/// the last importance (a `float` is immutable too).
#[derive(Default)]
struct Shared<'py, 'a> {
    strings: FxHashMap<&'a str, Bound<'py, PyString>>,
    importance: Option<(u64, Bound<'py, PyFloat>)>,
}

impl<'py, 'a> Shared<'py, 'a> {
    fn string(&mut self, py: Python<'py>, s: &'a str) -> Bound<'py, PyString> {
        if s.len() > SHARED_STRING_BYTES {
            return PyString::new(py, s);
        }
        if let Some(found) = self.strings.get(s) {
            return found.clone();
        }
        let made = PyString::new(py, s);
        if self.strings.len() < SHARED_STRINGS {
            self.strings.insert(s, made.clone());
        }
        made
    }

    fn float(&mut self, py: Python<'py>, value: f64) -> Bound<'py, PyFloat> {
        let bits = value.to_bits();
        match &self.importance {
            Some((last, made)) if *last == bits => made.clone(),
            _ => {
                let made = PyFloat::new(py, value);
                self.importance = Some((bits, made.clone()));
                made
            }
        }
    }
}

impl<'py> Kit<'py> {
    pub fn new(kit: &Bound<'py, PyTuple>) -> PyResult<Self> {
        if kit.len() != 5 {
            return Err(PyValueError::new_err(
                "kit must be (cls, scopes, fromisoformat, fromtimestamp, utc)",
            ));
        }
        let py = kit.py();
        let cls = kit.get_item(0)?;
        let cached = SETTERS.get_or_try_init(py, || {
            Ok::<_, PyErr>((cls.clone().unbind(), slot_setters(&cls)?.map(Bound::unbind)))
        })?;
        let setters = if cached.0.bind(py).is(&cls) {
            cached.1.each_ref().map(|s| s.bind(py).clone())
        } else {
            slot_setters(&cls)?
        };
        let scopes = kit
            .get_item(1)?
            .cast_into::<PyDict>()?
            .iter()
            .map(|(value, member)| Ok((value.extract::<String>()?, member)))
            .collect::<PyResult<_>>()?;
        Ok(Self {
            cls,
            scopes,
            from_iso: kit.get_item(2)?,
            from_timestamp: kit.get_item(3)?,
            utc: kit.get_item(4)?,
            names: names(py)?,
            setters,
        })
    }

    /// The entry for `row`, or `None` when the row is left to `row_to_entry`.
    fn entry<'a>(
        &self,
        row: RowRef<'a>,
        shared: &mut Shared<'py, 'a>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = self.cls.py();
        if row.version < 0 {
            return Ok(None);
        }
        let Some((_, scope)) = self.scopes.iter().find(|(value, _)| *value == row.scope) else {
            return Ok(None);
        };
        let Some(content) = parse_json(py, row.content, shared) else {
            return Ok(None);
        };
        let Some(metadata) = parse_json(py, row.metadata, shared) else {
            return Ok(None);
        };
        let Ok(created_at) = self.from_iso.call1((row.created_at,)) else {
            return Ok(None);
        };
        let expires_at = match row.expires_at {
            None => None,
            Some(at) => match self.from_timestamp.call1((at, &self.utc)) {
                Ok(at) => Some(at),
                Err(_) => return Ok(None),
            },
        };
        let n = self.names;
        // A copy of the template keeps the field order and needs no resize.
        let values = n.template.bind(py).copy()?;
        let f = &n.fields;
        values.set_item(f[0].bind(py), PyString::new(py, row.entry_id))?;
        values.set_item(f[1].bind(py), scope)?;
        if let Some(key) = row.key {
            values.set_item(f[2].bind(py), PyString::new(py, key))?;
        }
        values.set_item(f[3].bind(py), content)?;
        values.set_item(f[4].bind(py), metadata)?;
        values.set_item(f[5].bind(py), created_at)?;
        if let Some(at) = expires_at {
            values.set_item(f[6].bind(py), at)?;
        }
        values.set_item(f[7].bind(py), shared.float(py, row.importance))?;
        values.set_item(f[8].bind(py), row.version)?;
        let entry = n.object_new.bind(py).call1((&self.cls,))?;
        let [dict, fields_set, extra, private] = &self.setters;
        dict.call1((&entry, values))?;
        fields_set.call1((&entry, n.fields_set.bind(py).bitor(n.empty.bind(py))?))?;
        extra.call1((&entry, py.None()))?;
        private.call1((&entry, py.None()))?;
        Ok(Some(entry))
    }

    /// The entry for `row`, or the row itself as a tuple for `row_to_entry`.
    pub fn entry_or_row(&self, row: Row) -> PyResult<Bound<'py, PyAny>> {
        match self.entry(row.as_ref(), &mut Shared::default())? {
            Some(entry) => Ok(entry),
            None => Ok(row.into_pyobject(self.cls.py())?.into_any()),
        }
    }

    /// `(items, odd)`: an entry per row, in order, except at the indices in `odd`, which
    /// hold their rows for `row_to_entry`.
    ///
    /// The cyclic garbage collector is paused while a batch of more than `GC_PAUSE_ROWS`
    /// is built (and restored as it was): every object made here stays reachable from the
    /// list, so the collections the allocations would trigger find nothing, yet cost as much
    /// as the build. Nothing else runs meanwhile: building calls no Python code that could
    /// release the GIL.
    ///
    /// Resuming the collector as is would still cost one young collection over the whole
    /// batch (every object made counts towards the next one), a third of a bulk load's time,
    /// to find again that the list holds it all. So after a batch of more than
    /// `PROMOTE_ROWS`, when nothing is frozen, `gc.freeze()` then `gc.unfreeze()` move every
    /// tracked object, the batch with them, to the oldest generation instead (two list
    /// splices, no traversal) and zero the youngest generation's count. Only that changes:
    /// cyclic garbage the program left in the young generations (at most what they held, a
    /// few thousand objects) is collected by the next full collection rather than a young
    /// one; smaller batches, whose young collection is cheap, leave the generations alone.
    /// When objects are frozen (a program that froze its start-up state keeps it so), the
    /// collector resumes as is.
    pub fn entries(&self, rows: &Packed) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let py = self.cls.py();
        let gc = self.names.gc.bind(py);
        let paused = rows.len() > GC_PAUSE_ROWS && gc.call_method0("isenabled")?.is_truthy()?;
        if paused {
            gc.call_method0("disable")?;
        }
        let built = self.build_all(rows);
        if paused {
            if rows.len() > PROMOTE_ROWS
                && gc.call_method0("get_freeze_count")?.extract::<usize>()? == 0
            {
                gc.call_method0("freeze")?;
                gc.call_method0("unfreeze")?;
            }
            gc.call_method0("enable")?;
        }
        built
    }

    fn build_all(&self, rows: &Packed) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let py = self.cls.py();
        let mut shared = Shared::default();
        let mut odd = Vec::new();
        let mut items = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            if let Some(entry) = self.entry(row, &mut shared)? {
                items.push(entry);
            } else {
                odd.push(i);
                items.push(row.to_row().into_pyobject(py)?.into_any());
            }
        }
        Ok((PyList::new(py, items)?, odd))
    }
}

/// `json.loads(text)` for the JSON `json.dumps` writes, or `None` for anything else: syntax
/// errors, `NaN` and the infinities, integers outside i64, lone surrogates, control
/// characters in strings, nesting deeper than `MAX_DEPTH`.
fn parse_json<'py, 'a>(
    py: Python<'py>,
    text: &'a str,
    shared: &mut Shared<'py, 'a>,
) -> Option<Bound<'py, PyAny>> {
    let mut parser = Parser {
        py,
        bytes: text.as_bytes(),
        text,
        pos: 0,
        shared,
    };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    (parser.pos == parser.bytes.len()).then_some(value)
}

struct Parser<'py, 'a, 's> {
    py: Python<'py>,
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
    shared: &'s mut Shared<'py, 'a>,
}

impl<'py> Parser<'py, '_, '_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word.as_bytes()).then(|| self.pos = end)
    }

    fn value(&mut self, depth: usize) -> Option<Bound<'py, PyAny>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let py = self.py;
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => Some(self.string()?.into_any()),
            b't' => {
                self.literal("true")?;
                Some(PyBool::new(py, true).to_owned().into_any())
            }
            b'f' => {
                self.literal("false")?;
                Some(PyBool::new(py, false).to_owned().into_any())
            }
            b'n' => {
                self.literal("null")?;
                Some(py.None().into_bound(py))
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<Bound<'py, PyAny>> {
        self.pos += 1;
        let dict = PyDict::new(self.py);
        self.skip_ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(dict.into_any());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            dict.set_item(key, value).ok()?;
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                b'}' => {
                    self.pos += 1;
                    return Some(dict.into_any());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Bound<'py, PyAny>> {
        self.pos += 1;
        let list = PyList::empty(self.py);
        self.skip_ws();
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(list.into_any());
        }
        loop {
            list.append(self.value(depth + 1)?).ok()?;
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                b']' => {
                    self.pos += 1;
                    return Some(list.into_any());
                }
                _ => return None,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Python's grammar: `-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?`, an `int` without fraction
    /// or exponent, else `float(text)` (Rust's parse rounds correctly, as Python's does).
    fn number(&mut self) -> Option<Bound<'py, PyAny>> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return None;
            }
            float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return None;
            }
            float = true;
        }
        let text = &self.text[start..self.pos];
        if float {
            let value: f64 = text.parse().ok()?;
            Some(PyFloat::new(self.py, value).into_any())
        } else {
            let value: i64 = text.parse().ok()?;
            value.into_pyobject(self.py).ok().map(Bound::into_any)
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.pos..self.pos + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.pos += 4;
        u32::from_str_radix(digits, 16).ok()
    }

    fn string(&mut self) -> Option<Bound<'py, PyString>> {
        self.pos += 1;
        let start = self.pos;
        // The common case: no escapes, one slice of the text.
        loop {
            match self.peek()? {
                b'"' => {
                    let s = &self.text[start..self.pos];
                    self.pos += 1;
                    return Some(self.shared.string(self.py, s));
                }
                b'\\' => break,
                c if c < 0x20 => return None,
                _ => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(PyString::new(self.py, &out));
                }
                b'\\' => {
                    self.pos += 1;
                    let escaped = self.peek()?;
                    self.pos += 1;
                    let c = match escaped {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let unit = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&unit) {
                                // A high surrogate must pair with a low one; alone it is a
                                // lone surrogate, which only Python's str can hold.
                                self.literal("\\u")?;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return None;
                                }
                                0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                            } else {
                                unit
                            };
                            char::from_u32(code)?
                        }
                        _ => return None,
                    };
                    out.push(c);
                }
                c if c < 0x20 => return None,
                _ => {
                    // Copy the run up to the next quote, backslash or control character.
                    let run = self.pos;
                    while let Some(c) = self.peek() {
                        if c == b'"' || c == b'\\' || c < 0x20 {
                            break;
                        }
                        self.pos += 1;
                    }
                    out.push_str(&self.text[run..self.pos]);
                }
            }
        }
    }
}
