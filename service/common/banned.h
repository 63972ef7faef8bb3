/*
 * banned.h - functions that are too easy to misuse.  ipd.h includes it at
 * its end, and every source includes system headers before project headers,
 * so a use anywhere in project code is a compile error.
 */
#ifndef IPD_BANNED_H
#define IPD_BANNED_H

#define IPD_BANNED(func) sorry_##func##_is_banned

#undef strcpy
#define strcpy(x, y) IPD_BANNED(strcpy)
#undef strcat
#define strcat(x, y) IPD_BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) IPD_BANNED(strncpy)
#undef sprintf
#define sprintf(...) IPD_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) IPD_BANNED(vsprintf)
#undef strtok
#define strtok(x, y) IPD_BANNED(strtok)
#undef atoi
#define atoi(x) IPD_BANNED(atoi)
#undef gmtime
#define gmtime(x) IPD_BANNED(gmtime)
#undef localtime
#define localtime(x) IPD_BANNED(localtime)

#endif
