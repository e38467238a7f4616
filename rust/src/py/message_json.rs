//! A turn's JSON text, written straight from its pydantic-ai messages.
//!
//! Twin of `write_turn` in `memlane/_pure/message_json.py`, which reads line for line the
//! same. Only classes Python has checked against pydantic are written: `known` maps each to
//! its `MessageClass` (a tuple: the fields pydantic writes in its order, the attributes an
//! instance may have, the left-out fields and the values they must hold, the fields that must
//! hold a scalar, those typed `float`, and those that must be `None`). Anything else (a class
//! not in `known`, an unexpected attribute, a subclass of a builtin, a non-finite float, a
//! lone surrogate, nesting deeper than `MAX_DEPTH`, any exception) makes the whole call
//! return `None`, and the caller takes the Python path, which decides (and checks a class the
//! first time it is met). So this changes no result, only the time.
//!
//! Every step reads or makes Python objects, so the GIL is held throughout.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PyString, PyTuple,
};

use crate::json_text::{datetime_text, write_f64, write_str, DateTime};

/// Deeper values are left to the Python path (whose recursion limit decides there).
const MAX_DEPTH: usize = 100;

/// Something the writer does not take for certain; the caller falls back.
struct Unknown;

impl From<PyErr> for Unknown {
    fn from(_: PyErr) -> Self {
        Unknown
    }
}

type Out<T> = Result<T, Unknown>;

/// What `write_turn` returns: the raw messages, their JSON text, the turn's JSON text.
type Written<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyBytes>,
    Bound<'py, PyString>,
);

/// `datetime.datetime` and `datetime.timezone.utc`.
static DATETIME: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

/// Writes an int: pydantic writes one of any size as its digits.
fn write_int(int: &Bound<'_, PyInt>, out: &mut Vec<u8>) -> Out<()> {
    if let Ok(small) = int.extract::<i64>() {
        out.extend_from_slice(small.to_string().as_bytes());
    } else {
        out.extend_from_slice(int.str()?.to_str()?.as_bytes());
    }
    Ok(())
}

struct Writer<'a, 'py> {
    known: &'a Bound<'py, PyDict>,
    datetime: &'a Bound<'py, PyAny>,
    utc: &'a Bound<'py, PyAny>,
    text: Vec<u8>,
}

impl<'py> Writer<'_, 'py> {
    /// Writes `value` and returns its JSON form (the same object for a scalar).
    fn value(&mut self, value: &Bound<'py, PyAny>, depth: usize) -> Out<Bound<'py, PyAny>> {
        if depth > MAX_DEPTH {
            return Err(Unknown);
        }
        if let Ok(text) = value.cast_exact::<PyString>() {
            write_str(&mut self.text, text.to_str()?);
        } else if value.is_none() {
            self.text.extend_from_slice(b"null");
        } else if let Ok(flag) = value.cast_exact::<PyBool>() {
            let written: &[u8] = if flag.is_true() { b"true" } else { b"false" };
            self.text.extend_from_slice(written);
        } else if let Ok(int) = value.cast_exact::<PyInt>() {
            write_int(int, &mut self.text)?;
        } else if let Ok(float) = value.cast_exact::<PyFloat>() {
            if !write_f64(&mut self.text, float.value()) {
                return Err(Unknown);
            }
        } else if let Ok(list) = value.cast_exact::<PyList>() {
            return Ok(self.list(list, depth)?.into_any());
        } else if let Ok(dict) = value.cast_exact::<PyDict>() {
            return Ok(self.dict(dict, depth)?.into_any());
        } else if value.get_type().is(self.datetime) {
            let text = datetime_text(&self.datetime_fields(value)?).ok_or(Unknown)?;
            write_str(&mut self.text, &text);
            return Ok(PyString::new(value.py(), &text).into_any());
        } else {
            return Ok(self.object(value, depth)?.into_any());
        }
        Ok(value.clone())
    }

    /// A `datetime`'s fields, read as attributes (the limited API has no datetime accessors).
    fn datetime_fields(&self, value: &Bound<'py, PyAny>) -> Out<DateTime> {
        let py = value.py();
        let field =
            |name: &Bound<'py, PyString>| -> Out<u32> { Ok(value.getattr(name)?.extract()?) };
        let tzinfo = value.getattr(intern!(py, "tzinfo"))?;
        let offset = if tzinfo.is_none() {
            None
        } else if tzinfo.is(self.utc) {
            Some(0)
        } else {
            let delta = value.call_method0(intern!(py, "utcoffset"))?;
            if delta.is_none() {
                None
            } else {
                let part = |name: &str| -> Out<i32> { Ok(delta.getattr(name)?.extract()?) };
                if part("microseconds")? != 0 {
                    return Err(Unknown);
                }
                Some(part("days")? * 86_400 + part("seconds")?)
            }
        };
        Ok(DateTime {
            year: field(intern!(py, "year"))?,
            month: field(intern!(py, "month"))?,
            day: field(intern!(py, "day"))?,
            hour: field(intern!(py, "hour"))?,
            minute: field(intern!(py, "minute"))?,
            second: field(intern!(py, "second"))?,
            microsecond: field(intern!(py, "microsecond"))?,
            offset,
        })
    }

    fn list(&mut self, list: &Bound<'py, PyList>, depth: usize) -> Out<Bound<'py, PyList>> {
        let out = PyList::empty(list.py());
        self.text.push(b'[');
        for (i, item) in list.iter().enumerate() {
            if i > 0 {
                self.text.push(b',');
            }
            out.append(self.value(&item, depth + 1)?)?;
        }
        self.text.push(b']');
        Ok(out)
    }

    fn dict(&mut self, dict: &Bound<'py, PyDict>, depth: usize) -> Out<Bound<'py, PyDict>> {
        let out = PyDict::new(dict.py());
        self.text.push(b'{');
        for (i, (key, item)) in dict.iter().enumerate() {
            let key = key.cast_exact::<PyString>().map_err(PyErr::from)?;
            if i > 0 {
                self.text.push(b',');
            }
            write_str(&mut self.text, key.to_str()?);
            self.text.push(b':');
            out.set_item(key, self.value(&item, depth + 1)?)?;
        }
        self.text.push(b'}');
        Ok(out)
    }

    /// An instance of a class in `known`, as the object of the fields pydantic writes.
    fn object(&mut self, value: &Bound<'py, PyAny>, depth: usize) -> Out<Bound<'py, PyDict>> {
        let py = value.py();
        let spec = self.known.get_item(value.get_type())?.ok_or(Unknown)?;
        let spec = spec.cast::<PyTuple>().map_err(PyErr::from)?;
        let part = |i: usize| -> Out<Bound<'py, PyTuple>> {
            Ok(spec
                .get_item(i)?
                .cast_into::<PyTuple>()
                .map_err(PyErr::from)?)
        };
        let (names, left_out, defaults) = (part(0)?, part(2)?, part(3)?);
        let (scalars, floats, guarded) = (part(4)?, part(5)?, part(6)?);
        let attributes = spec.get_item(1)?;
        let attributes = attributes.cast::<PyFrozenSet>().map_err(PyErr::from)?;
        let values = value.getattr(intern!(py, "__dict__"))?;
        let values = values.cast_into::<PyDict>().map_err(PyErr::from)?;
        for name in values.keys() {
            if !attributes.contains(name)? {
                return Err(Unknown); // an attribute pydantic-ai may serialize too
            }
        }
        for (name, default) in left_out.iter().zip(defaults.iter()) {
            let held = value.getattr(name.cast_into::<PyString>().map_err(PyErr::from)?)?;
            if !(held.is(&default) || held.eq(default)?) {
                return Err(Unknown);
            }
        }
        for name in &scalars {
            let held = value.getattr(name.cast_into::<PyString>().map_err(PyErr::from)?)?;
            if !(held.is_none()
                || held.is_exact_instance_of::<PyString>()
                || held.is_exact_instance_of::<PyInt>()
                || held.is_exact_instance_of::<PyBool>())
            {
                return Err(Unknown);
            }
        }
        // Fields kept by the class (or attributes pydantic skips) are read as attributes.
        let direct = values.len() == names.len();
        for name in &guarded {
            let held = value.getattr(name.cast_into::<PyString>().map_err(PyErr::from)?)?;
            if !(held.is_none() || held.eq(py.None())?) {
                return Err(Unknown);
            }
        }
        let out = PyDict::new(py);
        self.text.push(b'{');
        for (i, name) in names.iter().enumerate() {
            let name = name.cast_into::<PyString>().map_err(PyErr::from)?;
            let item = if direct {
                values.get_item(&name)?.ok_or(Unknown)?
            } else {
                value.getattr(&name)?
            };
            if i > 0 {
                self.text.push(b',');
            }
            write_str(&mut self.text, name.to_str()?);
            self.text.push(b':');
            let is_float = floats
                .iter()
                .any(|f| f.is(&name) || f.eq(&name).unwrap_or(false));
            let written = if is_float && item.is_exact_instance_of::<PyBool>() {
                return Err(Unknown);
            } else if is_float && item.is_exact_instance_of::<PyInt>() {
                // pydantic writes an int in a float field as a float.
                let float = PyFloat::new(py, item.extract::<f64>()?);
                if !write_f64(&mut self.text, float.value()) {
                    return Err(Unknown);
                }
                float.into_any()
            } else {
                self.value(&item, depth + 1)?
            };
            out.set_item(name, written)?;
        }
        self.text.push(b'}');
        Ok(out)
    }
}

/// `(raw, messages, text)`: the messages' JSON form (what `messages_json` returns), their JSON
/// text, and the turn's JSON text (`turn_json`'s object with the text spliced in); `None`
/// where the Python path must decide.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the turn's fields, each typed where it is read
pub fn write_turn<'py>(
    messages: &Bound<'py, PyAny>,
    known: &Bound<'py, PyDict>,
    turn_id: &Bound<'py, PyAny>,
    user_prompt: &Bound<'py, PyAny>,
    assistant_response: &Bound<'py, PyAny>,
    timestamp: &Bound<'py, PyAny>,
    token_estimate: &Bound<'py, PyAny>,
) -> PyResult<Option<Written<'py>>> {
    let py = messages.py();
    let (datetime, utc) = DATETIME.get_or_try_init(py, || -> PyResult<_> {
        let module = py.import("datetime")?;
        let utc = module.getattr("timezone")?.getattr("utc")?;
        Ok((module.getattr("datetime")?.unbind(), utc.unbind()))
    })?;
    let mut writer = Writer {
        known,
        datetime: datetime.bind(py),
        utc: utc.bind(py),
        text: Vec::with_capacity(1024),
    };
    let written = (|| -> Out<Written<'py>> {
        let list = messages.cast_exact::<PyList>().map_err(PyErr::from)?;
        let mut text = Vec::with_capacity(64);
        text.extend_from_slice(b"{\"turn_id\":");
        write_int(
            turn_id.cast_exact::<PyInt>().map_err(PyErr::from)?,
            &mut text,
        )?;
        for (key, value) in [
            (&b",\"user_prompt\":"[..], user_prompt),
            (b",\"assistant_response\":", assistant_response),
        ] {
            text.extend_from_slice(key);
            write_str(
                &mut text,
                value.cast::<PyString>().map_err(PyErr::from)?.to_str()?,
            );
        }
        text.extend_from_slice(b",\"raw_messages\":");
        let raw = writer.list(list, 0)?;
        let encoded = std::mem::take(&mut writer.text);
        text.extend_from_slice(&encoded);
        text.extend_from_slice(b",\"timestamp\":");
        write_str(
            &mut text,
            timestamp
                .cast::<PyString>()
                .map_err(PyErr::from)?
                .to_str()?,
        );
        text.extend_from_slice(b",\"token_estimate\":");
        write_int(
            token_estimate.cast_exact::<PyInt>().map_err(PyErr::from)?,
            &mut text,
        )?;
        text.extend_from_slice(b",\"metadata\":{}}");
        let text = std::str::from_utf8(&text).map_err(|_| Unknown)?;
        Ok((raw, PyBytes::new(py, &encoded), PyString::new(py, text)))
    })();
    Ok(written.ok())
}
