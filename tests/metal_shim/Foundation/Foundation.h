// A stand-in for Apple's <Foundation/Foundation.h>, so that clang on Linux can syntax-check the Objective-C host
// loader of a Metal artifact (model.m) with ARC: `clang -fsyntax-only -x objective-c -fobjc-arc
// -fobjc-runtime=macosx-13.0 -I<tests/metal_shim>`. It declares only what tgc's loader uses, with Apple's
// signatures (nullability omitted); it is not Apple's header and does not prove that Apple's SDK accepts the code.
// Under ARC a selector no class or protocol declares is an error, and -Werror turns a message to a receiver whose
// type lacks the method, or an argument of the wrong type, into one too.
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef signed char BOOL;
#define nil ((id)0)
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#define NS_RETURNS_INNER_POINTER __attribute__((objc_returns_inner_pointer))

typedef NSUInteger NSStringEncoding;
enum { NSUTF8StringEncoding = 4 };

@class NSString;

@protocol NSObject
- (BOOL)isEqual:(id)object;
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
+ (instancetype)new;
- (instancetype)init;
@end

@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char *)nullTerminatedCString;
- (instancetype)initWithBytes:(const void *)bytes length:(NSUInteger)len encoding:(NSStringEncoding)encoding;
@property (readonly) const char *UTF8String NS_RETURNS_INNER_POINTER;
@property (readonly) NSUInteger length;
@end

@interface NSError : NSObject
@property (readonly, copy) NSString *localizedDescription;
@property (readonly) NSInteger code;
@end

@interface NSURL : NSObject
+ (NSURL *)fileURLWithPath:(NSString *)path;
@end
