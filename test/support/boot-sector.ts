import { writeFileSync } from "node:fs";

/**
 * Writes `file`: a 1 MiB raw disk whose boot sector (16-bit real mode,
 * hand-assembled) `times` times waits 10 s and writes `text` to COM1 (the
 * domain's serial console), then powers the VM off through the q35
 * chipset's ACPI port (BIOS firmware). A guest that boots in seconds and
 * never gets ready, for tests of what the provider does with such a guest.
 * The provider reads the console from when it opens it, after the start:
 * more than one writing leaves the text there for a reader that came late.
 */
export function bootSectorDisk(file: string, text: string, times = 1): string {
  if (!Number.isInteger(times) || times < 1 || times > 255)
    throw new Error(`times must be 1-255, not ${times}`);
  const msgAt = 0x2d;
  const code = Buffer.from([
    0xfb, //                   sti (int 15h's wait counts RTC interrupts)
    0x31,
    0xc0, //             xor ax, ax
    0x8e,
    0xd8, //             mov ds, ax
    0xb3,
    times, //            mov bl, times
    0xb4, //        again:
    0x86, //             mov ah, 86h: wait cx:dx microseconds (bx is kept)
    0xb9,
    0x98,
    0x00, //       mov cx, 0098h
    0xba,
    0x80,
    0x96, //       mov dx, 9680h  (10,000,000 µs)
    0xcd,
    0x15, //             int 15h
    0xbe,
    msgAt,
    0x7c, //      mov si, 7c00h + msgAt
    0xba,
    0xf8,
    0x03, //       mov dx, 3f8h (COM1)
    0xac, //                   lodsb
    0x84,
    0xc0, //             test al, al
    0x74,
    0x03, //             jz +3 (to dec bl)
    0xee, //                   out dx, al
    0xeb,
    0xf8, //             jmp lodsb
    0xfe,
    0xcb, //             dec bl
    0x75,
    0xe4, //             jnz again
    0xba,
    0x04,
    0x06, //       mov dx, 604h (q35 PM1a control)
    0xb8,
    0x00,
    0x20, //       mov ax, 2000h (SLP_EN, S5)
    0xef, //                   out dx, ax
    0xf4, //                   hlt
    0xeb,
    0xfd, //             jmp hlt
  ]);
  if (code.length !== msgAt)
    throw new Error(`the code is ${code.length} bytes, the message expected at ${msgAt}`);
  const sector = Buffer.alloc(512);
  code.copy(sector);
  const msg = Buffer.from(`${text.replace(/\n/g, "\r\n")}\0`, "latin1");
  if (msgAt + msg.length > 510) throw new Error("the message does not fit the boot sector");
  msg.copy(sector, msgAt);
  sector[510] = 0x55;
  sector[511] = 0xaa;
  writeFileSync(file, Buffer.concat([sector, Buffer.alloc(1024 * 1024 - 512)]));
  return file;
}
