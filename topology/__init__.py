"""The pure scheduling core: plain data in, decisions out; no I/O, no clock, no globals."""
