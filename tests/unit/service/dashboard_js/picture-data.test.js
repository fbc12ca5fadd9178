import { bytes, decode, decodeMap, idAt, indexOf, layerOf, upper } from "../static/picture-data.js";
import { eq, test } from "./check.js";
import { IDS, rawMap, rawPicture } from "./fixture.js";

test("picture-data: bytes decodes base64", () => {
  eq(bytes("AAH/"), Uint8Array.of(0, 1, 255));
  eq(bytes(""), new Uint8Array(0));
});

test("picture-data: decode gives the leaves their columns and the summaries their spans", () => {
  const pic = decode(rawPicture());
  eq([pic.n, pic.width, pic.nTouched], [7, 4, 1]);
  eq(pic.x0, Int32Array.of(0, 1, 2, 3, 0, 2, 0));
  eq(pic.size, Int32Array.of(1, 1, 1, 1, 2, 2, 4));
  eq(pic.purity, Uint8Array.of(255, 255, 255, 255, 255, 255, 128));
  eq(pic.touched, Uint8Array.of(0, 0, 0, 0, 0, 1, 0));
  eq(pic.folder, Uint8Array.of(0, 0, 1, 1, 0, 1, 0));
});

test("picture-data: idAt and indexOf go between a node's index and its id", () => {
  const pic = decode(rawPicture());
  eq(IDS.map((_, i) => idAt(pic, i)), IDS);
  eq(IDS.map((id) => indexOf(pic, id)), [0, 1, 2, 3, 4, 5, 6]);
  eq(indexOf(pic, IDS[3].replaceAll("-", "")), 3);
  eq(indexOf(pic, "00000009-1111-4222-8333-444444444449"), -1);
  eq(indexOf(pic, "not an id"), -1);
});

test("picture-data: layerOf and upper", () => {
  const pic = decode(rawPicture());
  eq([0, 3, 4, 5, 6].map((i) => layerOf(pic, i).layer), [0, 0, 1, 1, 2]);
  eq(layerOf(pic, 7), null);
  const x0 = Int32Array.of(0, 2, 2, 5);
  eq([upper(x0, 0, 4, -1), upper(x0, 0, 4, 0), upper(x0, 0, 4, 2), upper(x0, 0, 4, 9)], [0, 1, 3, 4]);
  eq(upper(x0, 1, 3, 0), 1);
});

test("picture-data: decodeMap reads a layer's points", () => {
  const m = decodeMap(rawMap());
  eq([m.layer, m.start, m.count, m.sampled, m.explained], [0, 0, 4, 4, [0.5, 0.25]]);
  eq(m.xy, Uint16Array.of(0, 0, 65535, 65535, 0, 65535, 65535, 0));
});
