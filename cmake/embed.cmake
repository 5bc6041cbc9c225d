# Turn a text file into a C header holding it as a NUL-terminated char array.
# Usage: cmake -DIN=file.sql -DOUT=file.h -DNAME=symbol -P embed.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}"
    "/* generated from ${IN} by cmake/embed.cmake; do not edit */\n"
    "static const char ${NAME}[] = {${bytes}0x00};\n")
