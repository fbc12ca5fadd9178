import { PALETTE, RGBS, SHADES, STYLES, colour, rgb, shade } from "../static/picture-style.js";
import { eq, ok, test } from "./check.js";

test("picture-style: rgb reads #rrggbb", () => {
  eq(rgb("#4e79a7"), [78, 121, 167]);
  eq(rgb("#000000"), [0, 0, 0]);
});

test("picture-style: each folder's shades go from 75 % white to its full colour", () => {
  eq(RGBS.length, PALETTE.length * SHADES);
  eq(STYLES.length, RGBS.length);
  eq(RGBS[SHADES - 1], rgb(PALETTE[0]), "full");
  eq(RGBS[0], [211, 222, 233], "palest: 75 % of the way to white");
  eq(STYLES[2 * SHADES + SHADES - 1], "rgb(" + rgb(PALETTE[2]).join(",") + ")");
  ok(RGBS.every((c) => c.every((x) => Number.isInteger(x) && x >= 0 && x <= 255)));
});

test("picture-style: shade takes a node's folder (capped) and purity step", () => {
  const pic = { folder: Uint8Array.of(0, 3, 40, 1), purity: Uint8Array.of(255, 0, 255, 128) };
  eq([0, 1, 2, 3].map((i) => shade(pic, i)),
    [SHADES - 1, 3 * SHADES, (PALETTE.length - 1) * SHADES + SHADES - 1, SHADES + 3]);
  eq([colour(1), colour(99)], [PALETTE[1], PALETTE[PALETTE.length - 1]]);
});
