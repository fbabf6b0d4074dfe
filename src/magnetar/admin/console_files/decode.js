// Payloads decoded by the topic's schema: JSON, Avro (binary encoding), strings; anything
// else as hex. The result is text, shown with textContent.

export function hex(bytes, limit = 4096) {
  const out = [];
  for (let i = 0; i < Math.min(bytes.length, limit); i++) out.push(bytes[i].toString(16).padStart(2, '0'));
  return out.join(' ') + (bytes.length > limit ? ` … (${bytes.length} bytes)` : '');
}

const utf8 = new TextDecoder('utf-8', {fatal: true});

class Reader {
  constructor(bytes) { this.b = bytes; this.i = 0; this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength); }
  need(n) { if (this.i + n > this.b.length) throw new Error('truncated Avro data'); }
  long() {
    let result = 0n, shift = 0n, byte;
    do {
      this.need(1);
      byte = this.b[this.i++];
      result |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if (shift > 70n) throw new Error('bad Avro varint');
    } while (byte & 0x80);
    const v = (result >> 1n) ^ -(result & 1n);
    return (v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) ? Number(v) : v.toString();
  }
  bytes() { const n = Number(this.long()); if (n < 0) throw new Error('bad Avro length'); this.need(n); const out = this.b.subarray(this.i, this.i + n); this.i += n; return out; }
  float() { this.need(4); const v = this.view.getFloat32(this.i, true); this.i += 4; return v; }
  double() { this.need(8); const v = this.view.getFloat64(this.i, true); this.i += 8; return v; }
}

function avroValue(r, schema, named) {
  if (typeof schema === 'string') {
    switch (schema) {
      case 'null': return null;
      case 'boolean': r.need(1); return r.b[r.i++] !== 0;
      case 'int': case 'long': return r.long();
      case 'float': return r.float();
      case 'double': return r.double();
      case 'bytes': return hex(r.bytes());
      case 'string': return utf8.decode(r.bytes());
      default:
        if (named.has(schema)) return avroValue(r, named.get(schema), named);
        throw new Error(`unknown Avro type ${schema}`);
    }
  }
  if (Array.isArray(schema)) {
    const idx = Number(r.long());
    if (idx < 0 || idx >= schema.length) throw new Error('bad Avro union index');
    return avroValue(r, schema[idx], named);
  }
  const type = schema.type;
  if (schema.name && ['record', 'error', 'enum', 'fixed'].includes(type)) {
    named.set(schema.name, schema);
    if (schema.namespace) named.set(`${schema.namespace}.${schema.name}`, schema);
  }
  switch (type) {
    case 'record': case 'error': {
      const out = {};
      for (const f of schema.fields) out[f.name] = avroValue(r, f.type, named);
      return out;
    }
    case 'enum': return schema.symbols[Number(r.long())];
    case 'fixed': r.need(schema.size); { const out = r.b.subarray(r.i, r.i + schema.size); r.i += schema.size; return hex(out); }
    case 'array': case 'map': {
      const out = type === 'array' ? [] : {};
      for (;;) {
        let n = Number(r.long());
        if (n === 0) break;
        if (n < 0) { n = -n; r.long(); }
        for (let k = 0; k < n; k++) {
          if (type === 'array') out.push(avroValue(r, schema.items, named));
          else { const key = utf8.decode(r.bytes()); out[key] = avroValue(r, schema.values, named); }
        }
      }
      return out;
    }
    default: return avroValue(r, type, named);
  }
}

export function decodeAvro(bytes, definition) {
  const schema = JSON.parse(definition);
  const r = new Reader(bytes);
  return avroValue(r, schema, new Map());
}

const STRINGS = new Set(['STRING']);

/** {kind, text} of a payload decoded by `schema` (the admin API's schema document or null). */
export function decodePayload(bytes, schema) {
  const type = schema ? schema.type : 'BYTES';
  try {
    if (type === 'AVRO') return {kind: 'Avro', text: JSON.stringify(decodeAvro(bytes, schema.data), null, 2)};
    if (type === 'JSON') return {kind: 'JSON', text: JSON.stringify(JSON.parse(utf8.decode(bytes)), null, 2)};
    if (STRINGS.has(type)) return {kind: 'string', text: utf8.decode(bytes)};
  } catch (e) {
    return {kind: `bytes (not ${type}: ${e.message})`, text: hex(bytes)};
  }
  // bytes: hex, and as text too when they are UTF-8
  let alt = null;
  try { alt = utf8.decode(bytes); } catch { /* not text */ }
  return {kind: 'bytes', text: hex(bytes), alt};
}
