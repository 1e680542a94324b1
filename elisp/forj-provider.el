;;; forj-provider.el --- Language model providers: configuration and streaming over curl  -*- lexical-binding: t; -*-

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

;; What every provider family shares, free of any UI: the list of
;; configured providers (`forj-providers'), API keys (auth-source, then
;; environment variables; never written to a buffer, a log or a command
;; line), and one streaming HTTP request run by curl in an asynchronous
;; process, so Emacs never waits on the network.
;;
;; A request is described by its family (forj-provider-openai.el,
;; forj-provider-anthropic.el, forj-provider-gemini.el): the URL, the
;; headers, the JSON body, and a function that turns each server-sent
;; event into actions.  This file runs curl, reads the HTTP status and
;; headers, splits the body into server-sent events, and reports to the
;; caller through these callbacks:
;;
;;   :on-text  (lambda (string))     a piece of the assistant's text
;;   :on-call  (lambda (call))       a native function call, normalized to
;;                                   a tool-call plist (:id :name :args)
;;   :on-stop  (lambda (info))       optional: the reply ended for another
;;                                   reason than its end (see below)
;;   :on-wait  (lambda (seconds attempt message))
;;                                   optional: the provider answered 429
;;                                   or 5xx (MESSAGE says so) and the
;;                                   request is sent again in SECONDS, for
;;                                   the ATTEMPTth time
;;   :on-done  (lambda ())           the reply is complete
;;   :on-error (lambda (message))    anything else: HTTP errors with the
;;                                   provider's own message, a cut stream,
;;                                   curl's own failures
;;   :on-usage (lambda (usage))      optional: the tokens of the reply so
;;                                   far, as `forj-usage-make' shapes them;
;;                                   each report replaces the one before
;;
;; Exactly one of :on-done and :on-error is called, once.  :on-stop
;; comes before :on-done, with a plist: (:kind length :reason R) when
;; the output token limit cut the reply (:cut-call NAME when it cut a
;; native call, which is then not reported), or (:kind refusal :reason R)
;; when the model or the provider's safety system refused, R being the
;; provider's own words.
;;
;; A request answered 429 or 5xx before any event is sent again, up to
;; `forj-provider-retries' times, after the delay the provider asks for
;; (Retry-After) or else an exponential backoff; `forj-provider-stop'
;; stops the wait too.  The secret
;; header reaches curl through its standard input (curl's -K -), the
;; body through a file only the user can read, deleted when curl ends.
;;
;; Messages handed to a family are provider-neutral plists:
;;   (:role "user" :text S)                           ; :context (ITEM ...) may come
;;                                                    ; first, ITEM: (:title :text)
;;   (:role "assistant" :text S :calls (CALL ...))   ; CALL: (:id :name :args)
;;   (:role "tool" :results (RESULT ...))            ; RESULT: (:id :name :content)

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'auth-source)
(require 'url-parse)
(require 'time-date)
(require 'forj)

;;; Options

(defcustom forj-providers
  '(("gemini" :family gemini :model "gemini-2.5-flash"
     :models ("gemini-3.1-pro-preview" "gemini-3-flash-preview" "gemini-2.5-pro"
              "gemini-2.5-flash-lite")
     :url "https://generativelanguage.googleapis.com/v1beta"
     :key-env ("GEMINI_API_KEY" "GOOGLE_API_KEY"))
    ("openai" :family openai :model "gpt-5.4"
     :models ("gpt-5.5" "gpt-5.4-mini" "gpt-5.4-nano" "gpt-4.1")
     :url "https://api.openai.com/v1" :key-env ("OPENAI_API_KEY"))
    ("anthropic" :family anthropic :model "claude-sonnet-4-6"
     :models ("claude-opus-4-7" "claude-haiku-4-5" "claude-sonnet-4-5")
     :url "https://api.anthropic.com/v1" :key-env ("ANTHROPIC_API_KEY"))
    ("openrouter" :family openai :model "openai/gpt-5.4"
     :url "https://openrouter.ai/api/v1" :key-env ("OPENROUTER_API_KEY"))
    ("ollama" :family openai :model "qwen2.5-coder" :url "http://127.0.0.1:11434/v1"
     :key-env nil :local t)
    ("llama.cpp" :family openai :model "local" :url "http://127.0.0.1:8080/v1"
     :key-env nil :local t)
    ("scripted" :family scripted :script "demo/session.json"))
  "The language model providers forj can talk to, by name.
Each entry is (NAME . PLIST).  PLIST keys:
  :family      `openai' (any OpenAI-compatible chat completions server:
               OpenAI, Ollama, llama.cpp, vLLM, OpenRouter), `anthropic',
               `gemini', or `scripted' (replays a recorded session)
  :url         the API base URL
  :model       the model name
  :models      other models of the provider `forj-set-model' offers,
               known when forj was released; the provider's own list
               (its models endpoint) is asked for too, in the background
  :thinking    Anthropic only: a number turns extended thinking on with
               that budget of tokens, `adaptive' lets the model choose
  :first-byte-timeout  seconds this provider may take before the first
               event of a reply, instead of `forj-provider-first-byte-timeout'
               (a local server on a CPU may read a long prompt for minutes)
  :key-env     environment variables that may hold the API key, in order
  :local       non-nil: a local server that needs no key
  :native-tools  non-nil: advertise tools through the provider's own
               function calling instead of the fenced protocol
  :max-tokens  the reply's token limit (Anthropic requires one)
  :context-window  the model's context window in tokens, when
               `forj-usage-context-windows' does not know it (local servers)
  :no-stream-usage  non-nil: do not ask an OpenAI-compatible server for
               token usage (`stream_options'), for servers that refuse it
  :script      for `scripted': the session file, relative to the forj
               checkout unless absolute.
API keys are looked up in auth-source first (host: the URL's host,
user: \"apikey\"), then in the :key-env variables."
  :type '(alist :key-type (string :tag "Name")
                :value-type (plist :tag "Settings"
                                   :key-type (choice (const :family) (const :url) (const :model)
                                                     (const :models)
                                                     (const :key-env) (const :local)
                                                     (const :native-tools) (const :max-tokens)
                                                     (const :script) (const :context-window)
                                                     (const :no-stream-usage) (const :thinking)
                                                     (const :first-byte-timeout))
                                   :value-type sexp))
  :group 'forj)

(defcustom forj-provider nil
  "The name of the provider in `forj-providers' to use.
nil picks the first provider whose API key is available; if there is
none, forj says which variables it looked at and offers the
scripted provider."
  :type '(choice (const :tag "The first with a key" nil) (string :tag "Provider name"))
  :group 'forj)

(defcustom forj-provider-curl-program "curl"
  "The curl program used for every request."
  :type 'string
  :group 'forj)

(defcustom forj-provider-connect-timeout 20
  "Seconds curl may take to connect to a provider."
  :type 'natnum
  :group 'forj)

(defcustom forj-provider-idle-timeout 90
  "Seconds a provider may stay silent before forj gives up on the request.
Once a reply has started, a server silent this long is given up: the
text so far is kept and the chat says so.  Before the first event of
a reply, `forj-provider-first-byte-timeout' applies instead.  nil
waits forever."
  :type '(choice (const :tag "Wait forever" nil) (number :tag "Seconds"))
  :group 'forj)

(defcustom forj-provider-first-byte-timeout nil
  "Seconds a provider may take before the first event of its reply.
nil: twice `forj-provider-idle-timeout' (reasoning models may think
for minutes before they send anything).  Past this, the request is
stopped and the chat says so.  Bytes that are not events (keep-alive
comments) restart the wait."
  :type '(choice (const :tag "Twice `forj-provider-idle-timeout'" nil) (number :tag "Seconds"))
  :group 'forj)

(defcustom forj-provider-retries 4
  "How many times a request answered 429 or 5xx is sent again.
Each retry waits as long as the provider's Retry-After asks, else
`forj-provider-retry-backoff' seconds, doubled at each retry (at most
60)."
  :type 'natnum
  :group 'forj)

(defcustom forj-provider-retry-backoff 2
  "Seconds before the first retry when the provider does not say how long."
  :type 'number
  :group 'forj)

(defcustom forj-provider-retry-max-wait 120
  "The longest wait, in seconds, before retrying a request.
A provider that asks for longer ends the reply with its message."
  :type 'natnum
  :group 'forj)

;;; Families

(defvar forj-provider--families nil
  "Alist: family symbol -> plist of its functions.
:request (lambda (PROVIDER SYSTEM MESSAGES TOOLS)) returns a plist
  (:url :headers :secret-headers :body) for curl; TOOLS is nil unless
  native function calling is on.
:event (lambda (STREAM EVENT DATA)) handles one server-sent event (its
  name, or nil, and its data) and returns a list of actions: (:text S),
  (:call CALL), (:usage USAGE), (:done), (:error S).  A family keeps
  its own state in the stream's state slot (`forj-provider-state').
:error-message (lambda (BODY)) extracts the provider's message from an
  error response body, or nil.
:start (lambda (PROVIDER SYSTEM MESSAGES TOOLS CALLBACKS)) for a family
  that does not use HTTP; returns a function that stops it.")

(defun forj-provider-register-family (family &rest functions)
  "Register provider FAMILY (a symbol) with FUNCTIONS (a plist)."
  (setf (alist-get family forj-provider--families) functions))

(defun forj-provider-get (name)
  "The provider called NAME as a plist with :name, or nil."
  (let ((entry (assoc name forj-providers)))
    (and entry (append (list :name (car entry)) (cdr entry)))))

;;; Keys

(defun forj-provider-host (url)
  "The host part of URL."
  (and url (url-host (url-generic-parse-url url))))

(defun forj-provider-key-source (provider)
  "The API key of PROVIDER and where it was found, as (KEY . WHERE), or nil.
auth-source first (host of the URL, user \"apikey\"), then the
environment variables of :key-env.  WHERE names the source, never
the key: \"the environment variable NAME\" or \"auth-source (host H,
user apikey)\"."
  (or (let ((host (forj-provider-host (plist-get provider :url))))
        (when host
          (let* ((found (car (auth-source-search :host host :user "apikey" :max 1)))
                 (secret (plist-get found :secret))
                 (key (if (functionp secret) (funcall secret) secret)))
            (and (stringp key) (not (string-empty-p key))
                 (cons key (format "auth-source (host %s, user apikey)" host))))))
      (cl-some (lambda (var)
                 (let ((value (getenv var)))
                   (and value (not (string-empty-p value))
                        (cons value (format "the environment variable %s" var)))))
               (plist-get provider :key-env))))

(defun forj-provider-key (provider)
  "The API key of PROVIDER, or nil (see `forj-provider-key-source')."
  (car (forj-provider-key-source provider)))

(defconst forj-provider-redacted "[key redacted]"
  "What stands for an API key in text that came back from the network.")

(defun forj-provider-redactor (key)
  "Make a function of a string: the string with KEY replaced.
KEY nil or shorter than 4 characters: the function changes nothing."
  (if (and (stringp key) (>= (length key) 4))
      (let ((pattern (regexp-quote key)))
        (lambda (text)
          (if (stringp text)
              (replace-regexp-in-string pattern forj-provider-redacted text t t)
            text)))
    #'identity))

(defvar forj-provider--id-count 0
  "How many call ids this Emacs made up.")

(defun forj-provider-new-id (prefix)
  "A call id made up for a call the provider sent without one.
PREFIX, then a random part and a counter: unique in a conversation,
across replies and across Emacs sessions, and made only of letters,
digits, `_' and `-' (what every provider accepts)."
  (format "%s_%s%d" prefix
          (substring (md5 (format "%s%s%s" (random) (float-time) (emacs-pid))) 0 10)
          (cl-incf forj-provider--id-count)))

(defun forj-provider-safe-id (id pattern &optional max)
  "ID as it is when it matches PATTERN (and has at most MAX characters).
Else a valid id made from it: the characters PATTERN refuses become
`_', and a hash of ID keeps apart ids that differ only there.  The
same ID always gives the same result, so a call and its result still
match."
  (if (and (stringp id) (string-match-p pattern id) (or (null max) (<= (length id) max)))
      id
    (let* ((id (if (stringp id) id ""))
           (clean (replace-regexp-in-string "[^A-Za-z0-9_-]" "_" id))
           (hash (substring (md5 id) 0 8))
           (room (- (or max 64) 1 (length hash))))
      (concat (if (> (length clean) room) (substring clean 0 room) clean) "_" hash))))

(defun forj-provider-usable-p (provider)
  "Whether PROVIDER can be used now: it needs no key, or its key is found."
  (or (plist-get provider :local)
      (eq (plist-get provider :family) 'scripted)
      (and (forj-provider-key provider) t)))

(defun forj-provider-pick ()
  "The provider to use: `forj-provider', else the first with a key, or nil."
  (if forj-provider
      (or (forj-provider-get forj-provider)
          (user-error "No forj provider named %S in `forj-providers'" forj-provider))
    (cl-loop for (name . plist) in forj-providers
             for provider = (append (list :name name) plist)
             when (and (not (plist-get provider :local))
                       (not (eq (plist-get provider :family) 'scripted))
                       (forj-provider-key provider))
             return provider)))

(defun forj-provider-key-variables ()
  "Every environment variable a provider key is looked up in."
  (delete-dups (cl-loop for (_ . plist) in forj-providers
                        append (copy-sequence (plist-get plist :key-env)))))

;;; Streams

(cl-defstruct (forj-provider-stream (:constructor forj-provider--make-stream) (:copier nil))
  "One streaming request."
  (process nil :documentation "The curl process, or nil for a non-HTTP family.")
  (stop nil :documentation "For a non-HTTP family: the function that stops it.")
  (family nil :documentation "The family's function plist.")
  (callbacks nil :documentation "Plist of :on-text :on-call :on-done :on-error.")
  (pending "" :documentation "Bytes received but not yet handled.")
  (status nil :documentation "The HTTP status, once the headers are read.")
  (headers nil :documentation "Alist of the response's headers, names downcased.")
  (body nil :documentation "An error response's body, as received.")
  (event nil :documentation "The current server-sent event's name.")
  (data nil :documentation "The current event's data lines, newest first.")
  (state nil :documentation "Plist the family keeps its own state in.")
  (finished nil :documentation "Non-nil once the family reported the end.")
  (seen nil :documentation "Non-nil once any event arrived.")
  (ended nil :documentation "Non-nil once a final callback was called.")
  (files nil :documentation "Temporary files to delete when curl ends.")
  (stderr nil :documentation "The buffer that gets curl's own messages.")
  (request nil :documentation "The family's request plist, kept to send it again.")
  (attempt 0 :documentation "How many times the request was sent again.")
  (timer nil :documentation "The timer of a retry being waited for.")
  (watchdog nil :documentation "The timer that gives up on a silent server.")
  (heard nil :documentation "When curl last received bytes, as a float time.")
  (provider-name nil :documentation "The provider's name, for messages.")
  (first-byte nil :documentation "The provider's own :first-byte-timeout, or nil.")
  (local nil :documentation "Non-nil for a local server, whose empty reply may mean a request too long.")
  (key-source nil :documentation "Where the key came from (never the key), or nil.")
  (redact #'identity :documentation "Takes a string, returns it without the key.")
  (key-start (lambda (_text) 0)
             :documentation "Takes a string, returns how much of its end begins the key.")
  (held "" :documentation "Text held back while it may be the start of the key."))

(defun forj-provider--end (stream kind &optional message)
  "Call STREAM's final callback once: KIND is :done or :error with MESSAGE."
  (unless (forj-provider-stream-ended stream)
    (forj-provider--flush-text stream)
    (setf (forj-provider-stream-ended stream) t)
    (forj-provider--disarm stream)
    (let ((callbacks (forj-provider-stream-callbacks stream)))
      (if (eq kind :done)
          (funcall (plist-get callbacks :on-done))
        (funcall (plist-get callbacks :on-error)
                 (funcall (forj-provider-stream-redact stream) message))))))

(defun forj-provider--text (stream text)
  "Hand TEXT of STREAM to :on-text, without the key.
The end of TEXT that could be the start of the key is held back until
the next piece shows whether it is."
  (let* ((key-free (funcall (forj-provider-stream-redact stream)
                            (concat (forj-provider-stream-held stream) text)))
         (hold (forj-provider--key-prefix-length stream key-free)))
    (setf (forj-provider-stream-held stream) (substring key-free (- (length key-free) hold)))
    (let ((out (substring key-free 0 (- (length key-free) hold))))
      (unless (string-empty-p out)
        (funcall (plist-get (forj-provider-stream-callbacks stream) :on-text) out)))))

(defun forj-provider--key-prefix-length (stream text)
  "The length of the longest end of TEXT that is a proper start of STREAM's key.
0 when there is no key."
  (funcall (forj-provider-stream-key-start stream) text))

(defun forj-provider-key-start (key)
  "A function of TEXT: the length of the longest end of TEXT that begins KEY."
  (if (and (stringp key) (>= (length key) 4))
      (lambda (text)
        (cl-loop for n from (min (1- (length key)) (length text)) downto 1
                 when (eq t (compare-strings key 0 n text (- (length text) n) nil))
                 return n
                 finally return 0))
    (lambda (_text) 0)))

(defun forj-provider--redact-value (redact value)
  "VALUE, parsed JSON, with REDACT applied to every string in it."
  (cond ((stringp value) (funcall redact value))
        ((vectorp value) (vconcat (mapcar (lambda (v) (forj-provider--redact-value redact v)) value)))
        ((and (consp value) (keywordp (car value)))
         (cl-loop for (key item) on value by #'cddr
                  append (list key (forj-provider--redact-value redact item))))
        ((hash-table-p value) value)
        (t value)))

(defun forj-provider--flush-text (stream)
  "Hand STREAM's held-back text to :on-text: the text it was part of ended.
The held text is the start of the key; four characters or more of it
are shown as `forj-provider-redacted' (a reply cut in the middle of
the key must not show most of it)."
  (let ((held (forj-provider-stream-held stream)))
    (unless (or (string-empty-p held) (forj-provider-stream-ended stream))
      (setf (forj-provider-stream-held stream) "")
      (funcall (plist-get (forj-provider-stream-callbacks stream) :on-text)
               (if (>= (length held) 4) forj-provider-redacted held)))))

(defun forj-provider--act (stream actions)
  "Carry out the ACTIONS a family returned for STREAM."
  (let ((callbacks (forj-provider-stream-callbacks stream)))
    (dolist (action actions)
      (unless (forj-provider-stream-ended stream)
        (pcase (car action)
          (:text (when (and (cadr action) (not (string-empty-p (cadr action))))
                   (forj-provider--text stream (cadr action))))
          (:call (forj-provider--flush-text stream)
                 (let ((call (cadr action)))
                   (funcall (plist-get callbacks :on-call)
                            (plist-put (copy-sequence call) :args
                                       (forj-provider--redact-value
                                        (forj-provider-stream-redact stream) (plist-get call :args))))))
          (:stop (forj-provider--flush-text stream)
                 (when (plist-get callbacks :on-stop)
                   (let ((info (cadr action)))
                     (funcall (plist-get callbacks :on-stop)
                              (plist-put (copy-sequence info) :reason
                                         (funcall (forj-provider-stream-redact stream)
                                                  (plist-get info :reason)))))))
          (:usage (when (plist-get callbacks :on-usage)
                    (funcall (plist-get callbacks :on-usage) (cadr action))))
          (:done (setf (forj-provider-stream-finished stream) t))
          (:error (forj-provider--stop-process stream)
                  (forj-provider--end stream :error (cadr action))))))))

(defun forj-provider-start (provider system messages tools callbacks)
  "Send MESSAGES with SYSTEM to PROVIDER and stream the reply.
TOOLS, a list of tool definitions, is advertised natively when the
provider has :native-tools.  CALLBACKS is a plist of :on-text,
:on-call, :on-done and :on-error (see the Commentary).  Return the
stream; `forj-provider-stop' stops it."
  (let* ((family (or (alist-get (plist-get provider :family) forj-provider--families)
                     (error "Unknown forj provider family %S" (plist-get provider :family))))
         (tools (and (plist-get provider :native-tools) tools))
         (stream (forj-provider--make-stream :family family :callbacks callbacks
                                             :provider-name (or (plist-get provider :name) "the provider")
                                             :local (plist-get provider :local)
                                             :first-byte (let ((own (plist-get provider :first-byte-timeout)))
                                                           (and (numberp own) own)))))
    (if (plist-get family :start)
        (setf (forj-provider-stream-stop stream)
              (funcall (plist-get family :start) provider system messages tools
                       (list :on-text (plist-get callbacks :on-text)
                             :on-call (plist-get callbacks :on-call)
                             :on-done (lambda () (forj-provider--end stream :done))
                             :on-error (lambda (m) (forj-provider--end stream :error m)))))
      (let* ((found (unless (plist-get provider :local) (forj-provider-key-source provider)))
             (key (car found)))
        (setf (forj-provider-stream-key-source stream) (cdr found)
              (forj-provider-stream-redact stream) (forj-provider-redactor key)
              (forj-provider-stream-key-start stream) (forj-provider-key-start key))
        (if (and (not (plist-get provider :local)) (not key))
            (run-at-time 0 nil #'forj-provider--end stream :error
                         (format "No API key for %s: set one of %s, or add it to auth-source (host %s, user apikey)"
                                 (plist-get provider :name)
                                 (string-join (plist-get provider :key-env) ", ")
                                 (forj-provider-host (plist-get provider :url))))
          (setf (forj-provider-stream-request stream)
                (funcall (plist-get family :request)
                         (plist-put (copy-sequence provider) :key key)
                         system messages tools))
          (forj-provider--curl stream (forj-provider-stream-request stream)))))
    stream))

(defun forj-provider--curl-quote (string)
  "STRING as a double-quoted value of a curl config file."
  (concat "\"" (replace-regexp-in-string "[\"\\\\]" "\\\\\\&" string) "\""))

(defun forj-provider--curl (stream request)
  "Run curl for STREAM's REQUEST (a plist from a family's :request)."
  (let* ((body-file (make-temp-file "forj-body-"))
         (headers (plist-get request :headers))
         (process-connection-type nil))
    (set-file-modes body-file #o600)
    (let ((coding-system-for-write 'utf-8-unix))
      (write-region (plist-get request :body) nil body-file nil 'silent))
    (setf (forj-provider-stream-files stream) (list body-file)
          (forj-provider-stream-stderr stream) (generate-new-buffer " *forj-curl-stderr*" t))
    (let ((process
           (make-process
            :name "forj-curl"
            :command (append (list forj-provider-curl-program
                                   ;; -q first: the user's ~/.curlrc (verbose would
                                   ;; print the secret header) is not read.
                                   "-q" "--silent" "--show-error" "--no-buffer"
                                   ;; A proxy's "200 Connection established" is
                                   ;; not the provider's status.
                                   "--suppress-connect-headers"
                                   "--dump-header" "-"
                                   "--connect-timeout" (number-to-string forj-provider-connect-timeout)
                                   "--config" "-"
                                   "--data-binary" (concat "@" body-file)
                                   "--header" "Content-Type: application/json")
                             (cl-loop for header in headers append (list "--header" header))
                             (list (plist-get request :url)))
            :connection-type 'pipe
            :coding 'binary
            :noquery t
            :stderr (forj-provider-stream-stderr stream)
            :filter (lambda (_process output) (forj-provider--receive stream output))
            :sentinel (lambda (process _event) (forj-provider--sentinel stream process)))))
      (setf (forj-provider-stream-process stream) process
            (forj-provider-stream-heard stream) (float-time))
      (forj-provider--arm stream)
      ;; Secrets go through curl's standard input, never its command line.
      (process-send-string
       process
       (mapconcat (lambda (header) (concat "header = " (forj-provider--curl-quote header) "\n"))
                  (plist-get request :secret-headers) ""))
      (process-send-eof process))))

(defun forj-provider--limit (stream)
  "The seconds STREAM may stay silent now, or nil for no limit."
  (cond ((forj-provider-stream-seen stream) forj-provider-idle-timeout)
        ((forj-provider-stream-first-byte stream))
        (forj-provider-first-byte-timeout)
        ((numberp forj-provider-idle-timeout) (* 2 forj-provider-idle-timeout))))

(defun forj-provider--arm (stream)
  "Start the timer that gives up on STREAM's server when it stays silent."
  (forj-provider--disarm stream)
  (let ((limit (forj-provider--limit stream)))
    (when (and (numberp limit) (> limit 0))
      (setf (forj-provider-stream-watchdog stream)
            (run-at-time (max 0.05 (- (+ (forj-provider-stream-heard stream) limit) (float-time)))
                         nil #'forj-provider--watch stream)))))

(defun forj-provider--disarm (stream)
  "Cancel STREAM's silence timer, if any."
  (when (timerp (forj-provider-stream-watchdog stream))
    (cancel-timer (forj-provider-stream-watchdog stream)))
  (setf (forj-provider-stream-watchdog stream) nil))

(defun forj-provider--watch (stream)
  "STREAM's silence timer ran out: give up, unless bytes came meanwhile."
  (setf (forj-provider-stream-watchdog stream) nil)
  (let ((limit (forj-provider--limit stream))
        (process (forj-provider-stream-process stream)))
    (when (and (not (forj-provider-stream-ended stream)) (process-live-p process) (numberp limit))
      (if (< (- (float-time) (forj-provider-stream-heard stream)) limit)
          (forj-provider--arm stream)
        (forj-provider--stop-process stream)
        (forj-provider--end
         stream :error
         (if (forj-provider-stream-seen stream)
             (format "%s stopped sending in the middle of the reply: nothing for %s seconds (`forj-provider-idle-timeout'), so forj gave up on it"
                     (forj-provider-stream-provider-name stream) limit)
           (format "%s did not answer: %s for %s seconds (`forj-provider-first-byte-timeout', or twice `forj-provider-idle-timeout'), so forj gave up on it"
                   (forj-provider-stream-provider-name stream)
                   (if (forj-provider-stream-status stream)
                       (format "HTTP %d but no event" (forj-provider-stream-status stream))
                     "no response")
                   limit)))))))

(defun forj-provider--receive (stream output)
  "Handle OUTPUT, raw bytes from curl, for STREAM."
  (setf (forj-provider-stream-heard stream) (float-time))
  (setf (forj-provider-stream-pending stream) (concat (forj-provider-stream-pending stream) output))
  (unless (forj-provider-stream-status stream)
    (forj-provider--read-headers stream))
  (when (forj-provider-stream-status stream)
    (if (forj-provider--ok-p stream)
        (forj-provider--read-events stream)
      (setf (forj-provider-stream-body stream)
            (concat (forj-provider-stream-body stream) (forj-provider-stream-pending stream))
            (forj-provider-stream-pending stream) ""))))

(defun forj-provider--ok-p (stream)
  "Whether STREAM's HTTP status is a success."
  (let ((status (forj-provider-stream-status stream)))
    (and status (<= 200 status 299))))

(defun forj-provider--read-headers (stream)
  "Read the response's header blocks from STREAM's pending bytes.
Interim responses (100 Continue) are skipped."
  (let ((pending (forj-provider-stream-pending stream)))
    (while (and (not (forj-provider-stream-status stream))
                (string-match "\r?\n\r?\n" pending))
      (let* ((block (substring pending 0 (match-beginning 0)))
             (rest (substring pending (match-end 0)))
             (lines (split-string block "\r?\n"))
             (status (and (string-match "\\`HTTP/[0-9.]+ \\([0-9]+\\)" (car lines))
                          (string-to-number (match-string 1 (car lines))))))
        (setq pending rest)
        (when (and status (>= status 200))
          (setf (forj-provider-stream-status stream) status
                (forj-provider-stream-headers stream)
                (cl-loop for line in (cdr lines)
                         when (string-match "\\`\\([^:]+\\):[ \t]*\\(.*\\)" line)
                         collect (cons (downcase (match-string 1 line)) (match-string 2 line)))))))
    (setf (forj-provider-stream-pending stream) pending)))

(defun forj-provider--read-events (stream)
  "Split STREAM's pending bytes into server-sent events and dispatch them."
  (let ((pending (forj-provider-stream-pending stream))
        (start 0))
    (while (and (not (forj-provider-stream-ended stream))
                (string-match "\n" pending start))
      (let ((line (forj-provider--decode (substring pending start (match-beginning 0)))))
        (setq start (match-end 0))
        (forj-provider--line stream (string-remove-suffix "\r" line))))
    (setf (forj-provider-stream-pending stream) (substring pending start))))

(defun forj-provider--decode (bytes)
  "BYTES as UTF-8 text; invalid bytes become U+FFFD, visibly."
  (replace-regexp-in-string "[\200-\377]" "\ufffd" (decode-coding-string bytes 'utf-8-unix) t t))

(defun forj-provider--line (stream line)
  "Handle one LINE of STREAM's event stream."
  (cond
   ((string-empty-p line) (forj-provider--dispatch stream))
   ((string-prefix-p ":" line))         ; a comment (keep-alive)
   ((string-match "\\`\\([a-z]+\\):? ?\\(.*\\)\\'" line)
    (let ((field (match-string 1 line)) (value (match-string 2 line)))
      (pcase field
        ("event" (setf (forj-provider-stream-event stream) value))
        ("data" (push value (forj-provider-stream-data stream)))
        ;; llama.cpp's server reports a failure mid-stream on a line of its
        ;; own, `error: {...}', which is no SSE field.
        ("error" (forj-provider--stop-process stream)
         (forj-provider--end stream :error (forj-provider-reported-error value))))))
   ;; Not SSE at all (an HTML page with a 200, a JSON body): keep it
   ;; for the error message.
   (t (setf (forj-provider-stream-body stream)
            (concat (forj-provider-stream-body stream) line "\n")))))

(defun forj-provider--dispatch (stream)
  "Hand STREAM's current event to its family."
  (let ((data (forj-provider-stream-data stream))
        (event (forj-provider-stream-event stream)))
    (setf (forj-provider-stream-data stream) nil
          (forj-provider-stream-event stream) nil)
    (when data
      (unless (forj-provider-stream-seen stream)
        ;; From the first event on, the idle limit applies.
        (setf (forj-provider-stream-seen stream) t)
        (when (forj-provider-stream-watchdog stream) (forj-provider--arm stream)))
      (let ((text (string-join (reverse data) "\n")))
        (forj-provider--act
         stream
         (condition-case err
             (funcall (plist-get (forj-provider-stream-family stream) :event)
                      stream event text)
           (error (list (list :error (format "The provider sent an event forj cannot read (%s): %s"
                                             (error-message-string err)
                                             (truncate-string-to-width text 200 nil nil "…")))))))))))

(defun forj-provider-reported-error (text)
  "The message for an error a server reported inside its reply, as TEXT."
  (let* ((json (ignore-errors (forj-provider-json text)))
         (message (or (forj-provider-error-message text)
                      (and (consp json) (stringp (plist-get json :message))
                           (plist-get json :message)))))
    (concat "The provider reported an error in its reply: "
            (or message (forj-provider--excerpt text)))))

(defun forj-provider-state (stream key)
  "The value of KEY in the family state of STREAM."
  (plist-get (forj-provider-stream-state stream) key))

(defun forj-provider-set-state (stream key value)
  "Set KEY to VALUE in the family state of STREAM."
  (setf (forj-provider-stream-state stream)
        (plist-put (forj-provider-stream-state stream) key value)))

(defun forj-provider-error-message (body)
  "The message in a JSON error BODY ({\"error\": {\"message\": ...}}), or nil.
Also takes a list of such objects (Gemini) and a bare error string."
  (let* ((json (ignore-errors (forj-provider-json body)))
         (json (if (and (vectorp json) (> (length json) 0)) (aref json 0) json))
         (err (and (consp json) (plist-get json :error))))
    (cond ((stringp err) err)
          ((consp err)
           (let ((message (plist-get err :message)) (type (or (plist-get err :type) (plist-get err :status))))
             (and (stringp message)
                  (if (stringp type) (format "%s (%s)" message type) message))))
          ((and (consp json) (stringp (plist-get json :message))) (plist-get json :message)))))

(defun forj-provider-parse-args (text)
  "Parse a native call's argument TEXT; unparsable text stays a string.
The worker then answers the call with a validation error the model
can act on."
  (if (or (null text) (string-blank-p text))
      (make-hash-table)
    (condition-case nil
        (let ((value (forj-provider-json text)))
          ;; An empty object parses to nil, which would encode as null.
          (or value (make-hash-table)))
      (error text))))

(defun forj-provider-json (text)
  "Parse JSON TEXT from a provider into plists, vectors, :null and :false.
`forj-provider-json-encode' gives the same JSON back."
  (json-parse-string text :object-type 'plist :array-type 'array
                     :null-object :null :false-object :false))

(defun forj-provider-json-encode (value)
  "Encode VALUE, made of plists, vectors, strings, numbers, :null, :false and t."
  (json-serialize value :null-object :null :false-object :false))

(defun forj-provider--stop-process (stream)
  "Stop STREAM's curl without reporting anything."
  (let ((process (forj-provider-stream-process stream)))
    (when (process-live-p process)
      (set-process-sentinel process #'ignore)
      (delete-process process)
      (forj-provider--cleanup stream)
      (forj-provider--stderr-text stream))))

(defun forj-provider--cleanup (stream)
  "Delete STREAM's temporary files."
  (dolist (file (forj-provider-stream-files stream))
    (ignore-errors (delete-file file)))
  (setf (forj-provider-stream-files stream) nil))

(defun forj-provider--sentinel (stream process)
  "Report the outcome of STREAM once its curl PROCESS has ended."
  (unless (process-live-p process)
    (forj-provider--disarm stream)
    (forj-provider--cleanup stream)
    (when (forj-provider--ok-p stream)
      (forj-provider--read-events stream)
      (forj-provider--last-event stream))
    (let ((code (process-exit-status process))
          (stderr (forj-provider--stderr-text stream)))
      (cond
       ((forj-provider-stream-ended stream))
       ((and (forj-provider-stream-status stream) (not (forj-provider--ok-p stream)))
        (unless (forj-provider--retry stream)
          (forj-provider--end stream :error
                              (concat (forj-provider--http-error stream)
                                      (let ((tries (forj-provider-stream-attempt stream)))
                                        (if (> tries 0)
                                            (format " (sent %d times)" (1+ tries))
                                          ""))))))
       ((forj-provider-stream-finished stream)
        (forj-provider--end stream :done))
       ((not (zerop code))
        (forj-provider--end stream :error
                            (format "The request failed (curl exit %d): %s" code
                                    (if (string-empty-p stderr) "no message" stderr))))
       ((null (forj-provider-stream-status stream))
        (forj-provider--end stream :error "The provider closed the connection without answering"))
       ((and (not (forj-provider-stream-seen stream)) (null (forj-provider-stream-body stream)))
        (forj-provider--end
         stream :error
         (concat "The provider's reply was empty (HTTP 200, no events)"
                 (and (forj-provider-stream-local stream)
                      (concat "; a local server answers so when the request is longer than"
                              " its context window: give the provider a smaller :context-window,"
                              " or drop context, then C-c C-j")))))
       ((forj-provider-stream-body stream)
        (let* ((body (forj-provider-stream-body stream))
               (own (ignore-errors
                      (funcall (plist-get (forj-provider-stream-family stream) :error-message)
                               (decode-coding-string body 'utf-8-unix)))))
          (forj-provider--end stream :error
                              (if own
                                  (format "The provider answered HTTP %d with an error instead of a reply: %s%s"
                                          (forj-provider-stream-status stream) own
                                          (forj-provider--key-hint stream own))
                                (format "The provider answered with something that is not an event stream: %s"
                                        (forj-provider--excerpt body))))))
       (t
        (forj-provider--end stream :error
                            "The reply stream was cut before it finished (the text so far is kept)"))))))

(defun forj-provider--last-event (stream)
  "Dispatch STREAM's last event if it arrived whole but without its blank line.
An event cut off in the middle is dropped (as the SSE standard says), and
the stream then counts as cut."
  (unless (string-empty-p (forj-provider-stream-pending stream))
    (forj-provider--line stream (forj-provider--decode (forj-provider-stream-pending stream)))
    (setf (forj-provider-stream-pending stream) ""))
  (let ((data (forj-provider-stream-data stream))
        (event (forj-provider-stream-event stream)))
    (setf (forj-provider-stream-data stream) nil)
    (when data
      (let ((actions (ignore-errors
                       (funcall (plist-get (forj-provider-stream-family stream) :event)
                                stream event (string-join (reverse data) "\n")))))
        (when actions
          (setf (forj-provider-stream-seen stream) t)
          (forj-provider--act stream actions))))))

(defun forj-provider--stderr-text (stream)
  "What curl printed on stderr for STREAM; its buffer is then killed.
A stderr pipe process may still be attached; its output is taken as is."
  (let ((buffer (forj-provider-stream-stderr stream)))
    (if (not (buffer-live-p buffer))
        ""
      (prog1 (with-current-buffer buffer (string-trim (buffer-string)))
        (let ((process (get-buffer-process buffer)))
          (when process (set-process-query-on-exit-flag process nil) (delete-process process)))
        (kill-buffer buffer)))))

(defun forj-provider--excerpt (body)
  "A short readable excerpt of an error BODY: HTML tags stripped, cut."
  (let ((text (decode-coding-string (or body "") 'utf-8-unix)))
    (when (string-match-p "<\\(?:html\\|body\\|head\\|!DOCTYPE\\)" text)
      (setq text (replace-regexp-in-string "<[^>]*>" " " text)))
    (setq text (string-trim (replace-regexp-in-string "[ \t\r\n]+" " " text)))
    (if (string-empty-p text) "(an empty body)" (truncate-string-to-width text 300 nil nil "…"))))

(defun forj-provider--http-error (stream)
  "The message for STREAM's failed HTTP status, with the provider's own words."
  (let* ((status (forj-provider-stream-status stream))
         (body (forj-provider-stream-body stream))
         (own (ignore-errors
                (funcall (plist-get (forj-provider-stream-family stream) :error-message)
                         (decode-coding-string (or body "") 'utf-8-unix))))
         (retry (cdr (assoc "retry-after" (forj-provider-stream-headers stream)))))
    (concat (format "HTTP %d%s: %s" status
                    (pcase status
                      (401 " (the API key was refused)")
                      (403 " (not allowed)")
                      (404 " (check the URL and the model name)")
                      (429 " (rate limited)")
                      ((pred (<= 500)) " (the provider failed)")
                      (_ ""))
                    (or own (forj-provider--excerpt body)))
            (if retry (format "; the provider asks to retry after %s seconds" retry) "")
            (forj-provider--key-hint stream (if (memq status '(401 403)) "key" (or own ""))))))

(defun forj-provider--key-hint (stream message)
  "Where STREAM's key came from, as a sentence, when MESSAGE speaks of a key."
  (let ((source (forj-provider-stream-key-source stream)))
    (if (and source
             (let ((case-fold-search t))
               (string-match-p
                "\\`key\\'\\|api[ _-]?key\\|authenticat\\|unauthori[sz]\\|credential\\|permission" message)))
        (format "; the key came from %s" source)
      "")))

(defun forj-provider--retryable-p (stream)
  "Whether STREAM's failed HTTP status is worth sending the request again for.
429 (rate limited) and 5xx (the provider failed, 529 overloaded)."
  (let ((status (forj-provider-stream-status stream)))
    (and status (or (= status 429) (>= status 500)))))

(defun forj-provider--retry-after (stream)
  "The seconds STREAM's failed response asks to wait, or nil.
Reads retry-after-ms, then Retry-After as seconds or as an HTTP date."
  (let* ((headers (forj-provider-stream-headers stream))
         (ms (cdr (assoc "retry-after-ms" headers)))
         (value (cdr (assoc "retry-after" headers))))
    (cond
     ((and ms (string-match-p "\\`[0-9.]+\\'" (string-trim ms)))
      (/ (string-to-number ms) 1000.0))
     ((null value) nil)
     ((string-match-p "\\`[0-9.]+\\'" (string-trim value))
      (string-to-number value))
     (t (let ((time (ignore-errors (date-to-time value))))
          (and time (max 0 (float-time (time-subtract time nil)))))))))

(defun forj-provider--retry-delay (stream)
  "Seconds to wait before sending STREAM's request again, or nil not to.
nil when the retries are used up or the provider asks for longer than
`forj-provider-retry-max-wait'."
  (let ((attempt (forj-provider-stream-attempt stream))
        (asked (forj-provider--retry-after stream)))
    (cond
     ((not (forj-provider--retryable-p stream)) nil)
     ((>= attempt forj-provider-retries) nil)
     ((and asked (> asked forj-provider-retry-max-wait)) nil)
     (asked (max asked 0.1))
     (t (min 60 (* forj-provider-retry-backoff (expt 2 attempt)))))))

(defun forj-provider--retry (stream)
  "Send STREAM's request again later when its failure is worth it; non-nil if so."
  (let ((delay (and (forj-provider-stream-request stream) (forj-provider--retry-delay stream))))
    (when delay
      (let ((message (forj-provider--http-error stream))
            (callbacks (forj-provider-stream-callbacks stream)))
        (cl-incf (forj-provider-stream-attempt stream))
        (setf (forj-provider-stream-pending stream) ""
              (forj-provider-stream-status stream) nil
              (forj-provider-stream-headers stream) nil
              (forj-provider-stream-body stream) nil
              (forj-provider-stream-event stream) nil
              (forj-provider-stream-data stream) nil
              (forj-provider-stream-state stream) nil
              (forj-provider-stream-finished stream) nil
              (forj-provider-stream-seen stream) nil
              (forj-provider-stream-process stream) nil
              (forj-provider-stream-timer stream)
              (run-at-time delay nil
                           (lambda ()
                             (setf (forj-provider-stream-timer stream) nil)
                             (unless (forj-provider-stream-ended stream)
                               (forj-provider--curl stream (forj-provider-stream-request stream))))))
        (when (plist-get callbacks :on-wait)
          (funcall (plist-get callbacks :on-wait)
                   delay (forj-provider-stream-attempt stream) message))
        t))))

(defun forj-provider-stop (stream)
  "Stop STREAM without calling any of its callbacks again."
  (when stream
    (when (timerp (forj-provider-stream-timer stream))
      (cancel-timer (forj-provider-stream-timer stream))
      (setf (forj-provider-stream-timer stream) nil))
    (setf (forj-provider-stream-ended stream) t)
    (forj-provider--disarm stream)
    (forj-provider--stop-process stream)
    (when (forj-provider-stream-stop stream)
      (funcall (forj-provider-stream-stop stream)))))

(defun forj-provider-stream-live-p (stream)
  "Return non-nil while STREAM is still running."
  (and stream (not (forj-provider-stream-ended stream))))

(provide 'forj-provider)
;;; forj-provider.el ends here
