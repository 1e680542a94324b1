;;; forj-epc.el --- EPC connection to the forj worker  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; One loopback connection to a forj worker, speaking the EPC wire
;; format: six hex digits of byte length, then one s-expression.  Every
;; method takes one JSON text and answers one JSON text, so this file
;; turns plists into JSON on the way out and JSON into plists on the way
;; back (see docs/protocol.md).
;;
;; Modelled on jsonrpc.el rather than the old epc.el: a table of pending
;; calls with continuations, a timer per call, and when the socket dies
;; every pending call fails at once with a "worker died" error, so
;; nothing ever hangs.  Calls from the worker are `event', handed to the
;; connection's event function, and questions the connection's request
;; function answers when it can (a review of an MCP client's call);
;; nothing read from the socket is ever evaluated.  Starting and restarting workers is
;; forj-worker.el's job.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)

;;; Options

(defcustom forj-epc-call-timeout 600
  "Seconds a call to the worker may take before it fails with a timeout.
Tool calls have their own, shorter limits inside the worker; this only
guards against a worker that stopped answering."
  :type 'number
  :group 'forj)

(defcustom forj-epc-json-frames t
  "Non-nil means ask the worker for JSON frames when saying hello.
Replies and events then arrive as raw JSON that Emacs parses where it
lies, instead of JSON inside a Lisp string that must be read first and
parsed after; large results and command output reach Emacs several
times faster.  Nil keeps to standard EPC frames."
  :type 'boolean
  :group 'forj)

(defcustom forj-epc-raw-strings t
  "Non-nil means let the worker send a reply's long strings raw.
With JSON frames, a string of 64 KiB or more (a large file read)
then follows the reply's JSON as plain UTF-8 bytes, and Emacs copies
and decodes it instead of parsing it out of the JSON: Emacs's own
share of receiving a megabyte falls to about a quarter.  Nil keeps
every string inside the JSON."
  :type 'boolean
  :group 'forj)

;;; Connection objects

(cl-defstruct (forj-epc-connection (:constructor forj-epc--make-connection)
                                   (:copier nil))
  "A live connection to one worker."
  (name "" :documentation "A name for messages and buffers.")
  (process nil :documentation "The network process.")
  (pending (make-hash-table) :documentation "UID -> (SUCCESS ERROR TIMER).")
  (next-uid 0 :documentation "The last UID used.")
  (on-event nil :documentation "Function of one plist, for worker events.")
  (on-request nil :documentation "Function of a method name, a plist and an answer function.")
  (on-close nil :documentation "Function of the connection and a reason string.")
  (dead nil :documentation "Why the connection ended, once it has.")
  (staging nil :documentation "Buffer holding output events' data while they are handled.")
  (depth 0 :documentation "How many runs of the filter are under way (it can nest).")
  (preamble nil :documentation "The line before the first frame, while it is awaited.")
  (noise nil :documentation "What arrived before the preamble (a login shell's output)."))

(defconst forj-epc-stdio-preamble "\nforj: frames follow\n"
  "The first line a --stdio worker writes, before any frame.
What arrives before it on the pipe is the remote login shell's (a
~/.bashrc that prints), never a frame.")

(defconst forj-epc--noise-limit 65536
  "How much may arrive before the preamble before the connection gives up.")

(cl-defstruct (forj-epc-output (:constructor forj-epc--make-output)
                               (:copier nil))
  "A command's output as it arrived, not yet made into a string.
It is the `:data' of an output event over JSON frames: bytes of UTF-8
between START and END of BUFFER, a unibyte buffer.  It is valid only
while the event function runs; `forj-epc-event-data' makes a string of
it, `forj-shell-append' inserts it without making one."
  (buffer nil :documentation "The unibyte buffer holding the bytes.")
  (start nil :documentation "Where the bytes start in BUFFER.")
  (end nil :documentation "Where they end.")
  (ascii nil :documentation "Non-nil if the worker said the bytes are all ASCII."))

(defun forj-epc-event-data (event)
  "The `:data' of EVENT as a string, whether it arrived as one or not."
  (let ((data (plist-get event :data)))
    (if (forj-epc-output-p data)
        (with-current-buffer (forj-epc-output-buffer data)
          (decode-coding-string (buffer-substring-no-properties (forj-epc-output-start data)
                                                                (forj-epc-output-end data))
                                'utf-8-unix t))
      data)))

(define-error 'forj-epc-error "forj worker error")

;;; Connecting

(cl-defun forj-epc-connect (port &key (host "127.0.0.1") (name "forj") on-event on-close
                                   on-request)
  "Connect to a worker listening on HOST and PORT; return the connection.
NAME labels the connection.  ON-EVENT is called with each event the
worker sends, as a plist; over JSON frames the `:data' of an output
event is a `forj-epc-output' (see `forj-epc-event-data').  ON-CLOSE
is called with the connection and a reason string when the connection
ends, for whatever reason.
ON-REQUEST is called with the name of any other method the worker
calls, its argument as a plist, and a function of one plist that sends
the answer (once, whenever it is ready); it returns nil for a method
it does not know, which the worker is told."
  (forj-epc-attach (make-network-process
                    :name (format "forj-epc %s" name)
                    :host host
                    :service port
                    :coding 'binary
                    :noquery t)
                   :name name :on-event on-event :on-close on-close :on-request on-request))

(cl-defun forj-epc-attach (process &key (name "forj") on-event on-close on-request preamble)
  "Speak EPC on PROCESS, a connection or the pipe of a worker's stdin and stdout.
Return the connection; NAME, ON-EVENT, ON-CLOSE and ON-REQUEST are as
for `forj-epc-connect'.  PROCESS gets a buffer, filter and sentinel of
the connection's own, and binary coding: nothing else may read its
output.  A worker started with --stdio (on another host, through TRAMP)
is spoken to this way; when its process ends, the connection does.
PREAMBLE, if non-nil, is the line the peer writes before its first
frame (`forj-epc-stdio-preamble'): everything before it is dropped."
  (let ((buffer (generate-new-buffer (format " *forj-epc %s*" name)))
        (conn (forj-epc--make-connection :name name :on-event on-event :on-close on-close
                                         :on-request on-request :preamble preamble)))
    (with-current-buffer buffer (set-buffer-multibyte nil))
    (set-process-buffer process buffer)
    (set-process-coding-system process 'binary 'binary)
    (set-process-filter process #'forj-epc--filter)
    (set-process-sentinel process #'forj-epc--sentinel)
    (process-put process 'forj-epc-connection conn)
    (setf (forj-epc-connection-process conn) process)
    conn))

(defun forj-epc-live-p (conn)
  "Non-nil if CONN is still connected."
  (and conn
       (not (forj-epc-connection-dead conn))
       (process-live-p (forj-epc-connection-process conn))))

(defun forj-epc-close (conn &optional reason)
  "Close CONN, failing every pending call with REASON (a string).
A socket is closed at once.  The process of a worker spoken to over its
own pipe (`forj-epc-attach') is left to its owner, who stops it as it
stops any worker: the end of its stdin first, so that it closes its
journal before it goes."
  (let ((process (forj-epc-connection-process conn)))
    (forj-epc--shutdown conn (or reason "connection closed"))
    (when (and (process-live-p process) (eq (process-type process) 'network))
      (delete-process process))))

;;; Calling the worker

(cl-defun forj-epc-call (conn method body &key success error timeout)
  "Call METHOD on CONN with BODY, a plist or hash table sent as JSON.
SUCCESS is called with the decoded reply (a plist).  ERROR is called
with an error plist (:type :message :recovery).  Both run from the
process filter or a timer, never before this function returns.
TIMEOUT, in seconds, defaults to `forj-epc-call-timeout'.  Return the
call's UID."
  (let* ((uid (cl-incf (forj-epc-connection-next-uid conn)))
         (error-fn (or error (lambda (err) (message "forj: %s" (plist-get err :message)))))
         (timer (run-at-time (or timeout forj-epc-call-timeout) nil
                             #'forj-epc--time-out conn uid)))
    (if (not (forj-epc-live-p conn))
        (progn
          (cancel-timer timer)
          (run-at-time 0 nil error-fn
                       (list :type "worker-died"
                             :message (format "the worker connection is closed (%s)"
                                              (or (forj-epc-connection-dead conn) "closed")))))
      (when (and forj-epc-json-frames (equal method "hello"))
        (setq body (forj-epc--offer-json-frames body)))
      (puthash uid (list success error-fn timer) (forj-epc-connection-pending conn))
      (forj-epc--send conn (list 'call uid (intern method)
                                 (list (forj-epc--json-encode body)))))
    uid))

(cl-defun forj-epc-call-sync (conn method body &key (timeout 10))
  "Call METHOD on CONN with BODY and wait up to TIMEOUT seconds for the reply.
Signal `forj-epc-error' with the error plist on failure.  For tests,
benchmarks and scripts: interactive code uses `forj-epc-call'."
  (let ((done nil) (value nil) (failure nil))
    (forj-epc-call conn method body
                   :timeout timeout
                   :success (lambda (v) (setq value v done t))
                   :error (lambda (e) (setq failure e done t)))
    (while (not done)
      (accept-process-output (forj-epc-connection-process conn) 0.05))
    (if failure
        (signal 'forj-epc-error (list failure))
      value)))

;;; Internals: sending

(defun forj-epc--offer-json-frames (body)
  "BODY of a hello call, its client saying it accepts JSON frames.
A worker that knows them answers in them; an older one ignores the
offer and keeps to standard frames, which are always understood.
With `forj-epc-raw-strings', the client also offers raw long strings
in them (\"raw\"), which a worker sends after the JSON instead of
inside it."
  (if (or (null body) (keywordp (car-safe body)))
      (let ((client (copy-sequence (plist-get body :client))))
        (plist-put (copy-sequence body) :client
                   (plist-put client :frames
                              (if forj-epc-raw-strings ["json" "raw"] ["json"]))))
    body))

(defun forj-epc--json-encode (body)
  "BODY (a plist, alist or hash table; nil for {}) as a JSON string."
  (if (null body)
      "{}"
    (json-serialize body :null-object :null :false-object :false)))

(defun forj-epc--send (conn message)
  "Frame MESSAGE (an s-expression) and write it to CONN's socket."
  (let* ((print-escape-newlines nil)
         (print-escape-control-characters nil)
         (print-escape-nonascii nil)
         (print-escape-multibyte nil)
         (print-length nil)
         (print-level nil)
         (print-circle nil)
         (payload (encode-coding-string (concat (prin1-to-string message) "\n") 'utf-8-unix t)))
    (when (> (length payload) #xffffff)
      (error "Message of %d bytes is larger than an EPC frame" (length payload)))
    (process-send-string (forj-epc-connection-process conn)
                         (concat (format "%06x" (length payload)) payload))))

;;; Internals: receiving

(defun forj-epc--filter (process output)
  "Append OUTPUT from PROCESS and handle every complete frame.
Only complete frames are taken; a frame split across any number of
chunks waits in the process buffer until its last byte arrives."
  (let ((conn (process-get process 'forj-epc-connection))
        (buffer (process-buffer process)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (goto-char (point-max))
        (insert output)
        (when (forj-epc-connection-preamble conn)
          (forj-epc--skip-preamble conn))
        (let ((messages nil)
              (staging (forj-epc--staging conn)))
          (cl-incf (forj-epc-connection-depth conn))
          (unwind-protect
              (progn
                (catch 'incomplete
            (while (not (forj-epc-connection-preamble conn))
              (when (< (buffer-size) 6) (throw 'incomplete nil))
              (let* ((head (buffer-substring-no-properties 1 7))
                     (length (and (string-match-p "\\`[0-9a-fA-F]\\{6\\}\\'" head)
                                  (string-to-number head 16))))
                (unless length
                  (forj-epc-close conn (format "bad frame header %S from the worker" head))
                  (throw 'incomplete nil))
                (when (< (buffer-size) (+ 6 length)) (throw 'incomplete nil))
                (push (forj-epc--take 7 (+ 7 length) staging) messages)
                (delete-region 1 (+ 7 length)))))
                (dolist (message (nreverse messages))
                  (forj-epc--dispatch conn message)))
            ;; The data of the events just handled is spent; a filter run
            ;; nested in a handler leaves it to the outermost one.
            (when (and (= 0 (cl-decf (forj-epc-connection-depth conn)))
                       (buffer-live-p staging))
              (if (forj-epc-connection-dead conn)
                  (kill-buffer staging)
                (with-current-buffer staging (erase-buffer))))))))))

(defun forj-epc--skip-preamble (conn)
  "Drop what precedes CONN's preamble in the current buffer, once it has come.
A remote login shell may print before it starts the worker; those bytes
are no frame, whatever they look like.  Too many, and the connection
ends, saying where they likely come from."
  (goto-char (point-min))
  (if (search-forward (forj-epc-connection-preamble conn) nil t)
      (progn
        (setf (forj-epc-connection-noise conn) (buffer-substring-no-properties 1 (match-beginning 0)))
        (delete-region 1 (point))
        (setf (forj-epc-connection-preamble conn) nil))
    (when (> (buffer-size) forj-epc--noise-limit)
      (forj-epc-close conn (format "%d bytes came before the worker started, and no worker: does the remote shell's startup (~/.bashrc) print, or read stdin?"
                                   (buffer-size))))))

(defun forj-epc--staging (conn)
  "CONN's buffer for output events' data, made on first use."
  (let ((buffer (forj-epc-connection-staging conn)))
    (unless (buffer-live-p buffer)
      (setq buffer (generate-new-buffer
                    (format " *forj-epc output %s*" (forj-epc-connection-name conn))))
      (with-current-buffer buffer
        (set-buffer-multibyte nil)
        (setq buffer-undo-list t))
      (setf (forj-epc-connection-staging conn) buffer))
    buffer))

(defun forj-epc--take (start end staging)
  "The frame between START and END of the current (process) buffer.
A JSON frame is parsed where it lies, straight from the buffer, and
comes back as (json HEADER OK . VALUE): VALUE is the decoded JSON
when OK, else an error plist.  An output event's raw data is copied
to the end of STAGING, a buffer, and its `:data' is a
`forj-epc-output' there: no string is made of it.  A reply's raw
long strings are decoded and put where the header says they belong.
A standard frame comes back as its raw bytes, a string."
  (goto-char start)
  (if (not (looking-at-p "([a-z-]+-json[ )]"))
      (buffer-substring-no-properties start end)
    (let ((header (condition-case nil
                      (let ((read-circle nil)) (read (current-buffer)))
                    (error nil))))
      (cons 'json
            (cons header
                  (condition-case err
                      (let* ((strings (forj-epc--raw-specs header))
                             (raw (if (eq (car-safe header) 'event-json)
                                      (nth 1 header)
                                    (and strings (apply #'+ (mapcar #'cadr strings)))))
                             ;; The last RAW bytes before the final newline are
                             ;; the event's data, or the reply's long strings,
                             ;; as they are (UTF-8).
                             (data-start (and (natnump raw) (- end 1 raw)))
                             (value (save-restriction
                                      (narrow-to-region (point) (or data-start end))
                                      (json-parse-buffer :object-type 'plist :array-type 'array
                                                         :null-object :null :false-object :false))))
                        (when strings
                          (forj-epc--put-raw-strings value strings data-start)
                          (setq data-start nil))
                        (when data-start
                          (let ((source (current-buffer)))
                            (with-current-buffer staging
                              (goto-char (point-max))
                              (let ((from (point)))
                                (insert-buffer-substring source data-start (1- end))
                                (setq value (plist-put value :data
                                                       (forj-epc--make-output
                                                        :buffer staging :start from
                                                        :end (point)
                                                        :ascii (eq (nth 2 header) 'ascii))))))))
                        (cons t value))
                    (error
                     (cons nil (list :type "bad-reply"
                                     :message (format "unreadable reply: %s"
                                                      (error-message-string err)))))))))))

(defun forj-epc--raw-specs (header)
  "The raw long strings a `return-json' HEADER announces, or nil.
Each is (PATH BYTES ASCII): PATH a list of object keys (strings)
and array indices, BYTES its length in UTF-8, ASCII non-nil when
every byte is ASCII."
  (when (eq (car-safe header) 'return-json)
    (let ((raw (nth 2 header)))
      (when (eq (car-safe raw) 'raw)
        (dolist (spec (cdr raw))
          (unless (and (consp spec) (listp (car spec)) (natnump (nth 1 spec)))
            (error "Malformed raw string spec %S" spec)))
        (cdr raw)))))

(defun forj-epc--put-raw-strings (value specs start)
  "Put the raw strings SPECS announce into VALUE, reading them from START.
The strings lie one after the other in the current buffer; each
replaces the null at its path."
  (dolist (spec specs)
    (let ((end (+ start (nth 1 spec))))
      ;; One copy: decoding without copying gives all-ASCII bytes back as
      ;; they are (a unibyte string reads and prints like any other), and
      ;; a string of a megabyte made twice costs Emacs a collection.
      (forj-epc--put-at value (car spec)
                        (decode-coding-string (buffer-substring-no-properties start end)
                                              'utf-8-unix t))
      (setq start end))))

(defun forj-epc--put-at (value path text)
  "Set the element of VALUE at PATH, whose last step names a null, to TEXT.
PATH holds object keys (strings) and array indices."
  (let ((container value))
    (dolist (step (butlast path))
      (setq container (forj-epc--step container step)))
    (let ((last (car (last path))))
      (cond ((and (integerp last) (vectorp container) (< -1 last (length container))
                  (eq (aref container last) :null))
             (aset container last text))
            ((and (stringp last) (listp container)
                  (eq (plist-get container (intern (concat ":" last))) :null))
             (plist-put container (intern (concat ":" last)) text))
            (t (error "No null at %S for a raw string" path))))))

(defun forj-epc--step (container step)
  "The element of CONTAINER (an array or a plist) that STEP names."
  (cond ((and (integerp step) (vectorp container) (< -1 step (length container)))
         (aref container step))
        ((and (stringp step) (listp container))
         (plist-get container (intern (concat ":" step))))
        (t (error "No %S in a reply for a raw string" step))))

(defun forj-epc--read (frame)
  "Read the s-expression in FRAME (raw bytes), or nil if it is unreadable."
  (condition-case nil
      (let ((read-circle nil))
        (car (read-from-string (decode-coding-string frame 'utf-8-unix t))))
    (error nil)))

(defun forj-epc--dispatch (conn frame)
  "Handle one FRAME received on CONN: raw bytes, or a parsed JSON frame."
  (if (eq (car-safe frame) 'json)
      (forj-epc--dispatch-json conn (cadr frame) (cddr frame))
    (let* ((message (forj-epc--read frame))
           (kind (car-safe message))
           (uid (car-safe (cdr-safe message))))
      (pcase kind
        ('return (forj-epc--settle conn uid t (nth 2 message)))
        ((or 'return-error 'epc-error)
         (forj-epc--settle conn uid nil (forj-epc--error-plist kind (nth 2 message))))
        ('call (forj-epc--incoming-call conn uid (nth 2 message) (nth 3 message)))
        (_ (message "forj: ignoring an unreadable message from the worker"))))))

(defun forj-epc--dispatch-json (conn header outcome)
  "Handle a JSON frame on CONN: its HEADER and OUTCOME, (OK . VALUE).
`(return-json UID [RAW])' answers call UID; `(event-json)' is an event,
which needs no answer."
  (pcase header
    (`(return-json ,uid . ,_) (forj-epc--finish conn uid outcome))
    (`(event-json . ,_) (when (car outcome) (forj-epc--event conn (cdr outcome))))
    (_ (message "forj: ignoring an unreadable message from the worker"))))

(defun forj-epc--settle (conn uid ok value)
  "Finish pending call UID on CONN: OK means VALUE is the reply text.
Otherwise VALUE is an error plist."
  (when (and (integerp uid) (gethash uid (forj-epc-connection-pending conn)))
    (forj-epc--finish
     conn uid
     (if (not ok)
         (cons nil value)
       (condition-case err
           (cons t (forj-epc--json-decode value))
         (error (cons nil (list :type "bad-reply"
                                :message (format "unreadable reply: %s"
                                                 (error-message-string err))))))))))

(defun forj-epc--finish (conn uid outcome)
  "Finish pending call UID on CONN with OUTCOME, (t . REPLY) or (nil . ERROR)."
  (let ((entry (and (integerp uid) (gethash uid (forj-epc-connection-pending conn)))))
    (when entry
      (remhash uid (forj-epc-connection-pending conn))
      (cancel-timer (nth 2 entry))
      (if (car outcome)
          (when (nth 0 entry) (funcall (nth 0 entry) (cdr outcome)))
        (funcall (nth 1 entry) (cdr outcome))))))

(defun forj-epc--error-plist (kind payload)
  "An error plist from a KIND message carrying PAYLOAD."
  (or (and (eq kind 'return-error)
           (stringp payload)
           (ignore-errors (forj-epc--json-decode payload)))
      (list :type (symbol-name kind)
            :message (if (stringp payload) payload (format "%S" payload)))))

(defun forj-epc--json-decode (text)
  "Decode the JSON TEXT into plists and vectors.
False is `:false' and null `:null', so `json-serialize' gives it back."
  (unless (stringp text)
    (error "Expected a JSON text, got %S" (type-of text)))
  (json-parse-string text :object-type 'plist :array-type 'array
                     :null-object :null :false-object :false))

(defun forj-epc--incoming-call (conn uid method args)
  "Answer the worker's call UID of METHOD with ARGS on CONN.
`event' goes to the event function; another method to the request
function, which answers later; without one it gets an EPC error."
  (if (not (eq method 'event))
      (forj-epc--incoming-request conn uid method args)
    (forj-epc--send conn (list 'return uid nil))
    (let ((event (and (stringp (car-safe args))
                      (ignore-errors (forj-epc--json-decode (car args))))))
      (when event (forj-epc--event conn event)))))

(defun forj-epc--event (conn event)
  "Hand EVENT, a plist, to CONN's event function."
  (let ((handler (forj-epc-connection-on-event conn)))
    (when handler
      (condition-case err
          (funcall handler event)
        (error (message "forj: event handler failed: %s" (error-message-string err)))))))

(defun forj-epc--incoming-request (conn uid method args)
  "Hand the worker's call UID of METHOD with ARGS on CONN to its request function."
  (let ((handler (forj-epc-connection-on-request conn))
        (body (and (stringp (car-safe args))
                   (ignore-errors (forj-epc--json-decode (car args)))))
        (answered nil))
    (unless (and handler (symbolp method) body
                 (condition-case err
                     (funcall handler (symbol-name method) body
                              (lambda (answer)
                                (unless (or answered (not (forj-epc-live-p conn)))
                                  (setq answered t)
                                  (forj-epc--send conn (list 'return uid
                                                             (forj-epc--json-encode answer))))))
                   (error (message "forj: request handler failed: %s" (error-message-string err))
                          nil)))
      (forj-epc--send conn (list 'epc-error uid (format "No such method: %S" method))))))

;;; Internals: timeouts and death

(defun forj-epc--time-out (conn uid)
  "Fail pending call UID on CONN: it took too long."
  (let ((entry (gethash uid (forj-epc-connection-pending conn))))
    (when entry
      (remhash uid (forj-epc-connection-pending conn))
      (funcall (nth 1 entry)
               (list :type "timeout"
                     :message "the worker did not answer in time"
                     :recovery '("M-x forj-worker-restart if it keeps happening"))))))

(defun forj-epc--sentinel (process event)
  "PROCESS changed state with EVENT: if it is gone, fail everything pending."
  (unless (process-live-p process)
    (let ((conn (process-get process 'forj-epc-connection)))
      (when conn
        (forj-epc--shutdown conn (string-trim (format "connection lost: %s" event)))))))

(defun forj-epc--shutdown (conn reason)
  "Mark CONN dead for REASON and fail every pending call, once."
  (unless (forj-epc-connection-dead conn)
    (setf (forj-epc-connection-dead conn) reason)
    (let ((pending nil))
      (maphash (lambda (uid entry) (push (cons uid entry) pending))
               (forj-epc-connection-pending conn))
      (clrhash (forj-epc-connection-pending conn))
      (dolist (item (sort pending (lambda (a b) (< (car a) (car b)))))
        (cancel-timer (nth 3 item))
        (funcall (nth 2 item)
                 (list :type "worker-died"
                       :message (format "the worker died (%s)" reason)
                       :recovery '("The next call starts a new worker"
                                   "M-x forj-worker-log shows what it printed")))))
    (let* ((process (forj-epc-connection-process conn))
           (buffer (process-buffer process)))
      ;; Killing a buffer hangs up its process: a worker on its own pipe is
      ;; its owner's to stop (`forj-epc-close'), so it lets go of it first.
      (unless (eq (process-type process) 'network)
        (set-process-buffer process nil))
      (when (buffer-live-p buffer) (kill-buffer buffer)))
    (let ((staging (forj-epc-connection-staging conn)))
      (when (and (buffer-live-p staging) (= 0 (forj-epc-connection-depth conn)))
        (kill-buffer staging)))
    (when (forj-epc-connection-on-close conn)
      (funcall (forj-epc-connection-on-close conn) conn reason))))

(provide 'forj-epc)
;;; forj-epc.el ends here
