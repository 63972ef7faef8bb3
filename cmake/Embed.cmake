# Turn the file IN into a C source OUT defining
#   const char SYMBOL[]; const unsigned long SYMBOL_len;
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR n "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" body "${body}")
file(WRITE ${OUT} "/* generated from ${IN}; do not edit */\n"
  "extern const char ${SYMBOL}[];\nextern const unsigned long ${SYMBOL}_len;\n"
  "const char ${SYMBOL}[] = {\n${body}0x00};\n"
  "const unsigned long ${SYMBOL}_len = ${n};\n")
