;;; forj-usage.el --- Tokens, cost and context use of a chat  -*- lexical-binding: t; -*-

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

;; Every provider reports the tokens of a reply in its stream, each in
;; its own words; the families turn them into one shape (see
;; `forj-usage-make'):
;;
;;   (:input N :output N :cache-read N :cache-write N)
;;
;; :input counts the prompt tokens billed at the full price, so the
;; prompt was :input + :cache-read + :cache-write tokens in all.  OpenAI
;; and Gemini count cached tokens inside their prompt total, Anthropic
;; beside it; `forj-usage-make' takes either.
;;
;; A chat keeps the usage of its last reply and the sum over the
;; session (since the chat was opened), each with its cost from
;; `forj-usage-prices', and shows them in its header line with the
;; share of the model's context window the next request will fill
;; (`forj-usage-context-windows').  That share is measured when the
;; provider reported the last request's tokens, and estimated from the
;; bytes of the conversation otherwise (shown with "≈").
;;
;; Beside the tokens, the header line counts the chat's tool calls and
;; how many failed, as the worker counted them (its `metrics' method),
;; unless `forj-usage-show-tool-metrics' is nil.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-session)

;;; Options

(defcustom forj-usage-prices
  '(;; Anthropic
    ("claude-opus-4-7" 5.0 25.0 0.5 6.25)
    ("claude-opus-4-6" 5.0 25.0 0.5 6.25)
    ("claude-opus-4-5" 5.0 25.0 0.5 6.25)
    ("claude-opus-4" 15.0 75.0 1.5 18.75)
    ("claude-sonnet-4" 3.0 15.0 0.3 3.75)
    ("claude-3-7-sonnet" 3.0 15.0 0.3 3.75)
    ("claude-haiku-4-5" 1.0 5.0 0.1 1.25)
    ("claude-3-5-haiku" 0.8 4.0 0.08 1.0)
    ;; OpenAI
    ("gpt-5-nano" 0.05 0.4 0.005 0.0)
    ("gpt-5-mini" 0.25 2.0 0.025 0.0)
    ("gpt-5" 1.25 10.0 0.125 0.0)
    ("gpt-4.1-nano" 0.1 0.4 0.025 0.0)
    ("gpt-4.1-mini" 0.4 1.6 0.1 0.0)
    ("gpt-4.1" 2.0 8.0 0.5 0.0)
    ("gpt-4o-mini" 0.15 0.6 0.075 0.0)
    ("gpt-4o" 2.5 10.0 1.25 0.0)
    ("o4-mini" 1.1 4.4 0.275 0.0)
    ("o3" 2.0 8.0 0.5 0.0)
    ;; Google
    ("gemini-2.5-pro" 1.25 10.0 0.31 0.0)
    ("gemini-2.5-flash-lite" 0.1 0.4 0.025 0.0)
    ("gemini-2.5-flash" 0.3 2.5 0.075 0.0))
  "Prices of models in US dollars per million tokens.
Each entry is (MODEL INPUT OUTPUT CACHE-READ CACHE-WRITE): INPUT for
prompt tokens at the full price, OUTPUT for the reply, CACHE-READ for
prompt tokens read from the provider's cache, CACHE-WRITE for prompt
tokens written to it (Anthropic; 0 where writing costs nothing extra).
MODEL matches a model name that starts with it, after any \"vendor/\"
part (OpenRouter's \"openai/gpt-4.1\" is \"gpt-4.1\"); the longest
match wins.  A model with no entry shows its tokens and no cost.  The
defaults are the providers' list prices when this was written: check
them against your provider's page."
  :type '(repeat (list :tag "Model"
                       (string :tag "Model name (or its start)")
                       (number :tag "Input, $ per million tokens")
                       (number :tag "Output, $ per million tokens")
                       (number :tag "Cache read, $ per million tokens")
                       (number :tag "Cache write, $ per million tokens")))
  :group 'forj)

(defcustom forj-usage-context-windows
  '(("claude-" . 200000)
    ("gpt-5" . 400000)
    ("gpt-4.1" . 1047576)
    ("gpt-4o" . 128000)
    ("o3" . 200000)
    ("o4-mini" . 200000)
    ("gemini-3" . 1048576)
    ("gemini-2.5" . 1048576)
    ("gemini-2.0" . 1048576))
  "The context window of models, in tokens.
Each entry is (MODEL . TOKENS); MODEL matches as in `forj-usage-prices'.
A provider's own :context-window in `forj-providers' wins; a model
found nowhere gets `forj-usage-default-context-window'."
  :type '(alist :key-type (string :tag "Model name (or its start)")
                :value-type (natnum :tag "Tokens"))
  :group 'forj)

(defcustom forj-usage-default-context-window 32768
  "The context window, in tokens, assumed for a model forj knows nothing of.
Local servers often run with a small one; set :context-window on the
provider in `forj-providers' to the value the server uses."
  :type 'natnum
  :group 'forj)

(defcustom forj-usage-bytes-per-token 3.5
  "Bytes of text per token, for estimates where no provider counted.
Used for the context share before the first reply, after a
compaction, and with providers that report no usage."
  :type 'number
  :group 'forj)

;;; Usage

(defun forj-usage-make (&rest args)
  "Usage from ARGS, a plist of counts as a provider reports them.
:input and :output are the prompt and reply tokens; :cache-read and
:cache-write the prompt tokens read from and written to the cache.
With :input-includes-cache non-nil, :input counts the cached tokens too
\(OpenAI, Gemini) and they are taken out of it."
  (let* ((read (or (plist-get args :cache-read) 0))
         (write (or (plist-get args :cache-write) 0))
         (input (or (plist-get args :input) 0)))
    (list :input (max 0 (if (plist-get args :input-includes-cache) (- input read write) input))
          :output (or (plist-get args :output) 0)
          :cache-read read
          :cache-write write)))

(defun forj-usage-prompt (usage)
  "All the prompt tokens of USAGE: full price, cache read and cache write."
  (+ (plist-get usage :input) (plist-get usage :cache-read) (plist-get usage :cache-write)))

(defun forj-usage-add (a b)
  "The sum of usages A and B (either may be nil)."
  (cl-loop for key in '(:input :output :cache-read :cache-write)
           append (list key (+ (or (plist-get a key) 0) (or (plist-get b key) 0)))))

(defun forj-usage--lookup (model table)
  "Return the value of the longest key of TABLE that begins MODEL, or nil.
TABLE is a list whose elements start with a model name.  A
\"vendor/\" part of MODEL is ignored."
  (when (stringp model)
    (let ((name (downcase (replace-regexp-in-string "\\`.*/" "" model)))
          (best nil))
      (dolist (entry table)
        (let ((key (downcase (car entry))))
          (when (and (string-prefix-p key name)
                     (or (null best) (> (length key) (length (car best)))))
            (setq best entry))))
      best)))

(defun forj-usage-cost (model usage)
  "The cost in dollars of USAGE with MODEL, or nil if MODEL has no price."
  (let ((price (cdr (forj-usage--lookup model forj-usage-prices))))
    (when price
      (/ (+ (* (plist-get usage :input) (nth 0 price))
            (* (plist-get usage :output) (nth 1 price))
            (* (plist-get usage :cache-read) (nth 2 price))
            (* (plist-get usage :cache-write) (nth 3 price)))
         1e6))))

(defvar forj-usage-learned-windows (make-hash-table :test #'equal)
  "Context windows servers said (forj-window.el).
\(URL . MODEL) to tokens, or `none' when the server said nothing.")

(defun forj-usage-window-key (provider)
  "The key of PROVIDER's model in `forj-usage-learned-windows'."
  (cons (plist-get provider :url) (plist-get provider :model)))

(defun forj-usage-known-window (provider)
  "The window `forj-usage-context-windows' gives PROVIDER's model, or nil."
  (cdr (forj-usage--lookup (plist-get provider :model) forj-usage-context-windows)))

(defun forj-usage-context-window (provider)
  "The context window of PROVIDER's model, in tokens.
The provider's :context-window, else the window its server said
\(forj-window.el), else `forj-usage-context-windows', else
`forj-usage-default-context-window'."
  (or (plist-get provider :context-window)
      (let ((learned (gethash (forj-usage-window-key provider) forj-usage-learned-windows)))
        (and (natnump learned) learned))
      (forj-usage-known-window provider)
      forj-usage-default-context-window))

(defun forj-usage-tokens-of-bytes (bytes)
  "An estimate of the tokens in BYTES bytes of text."
  (ceiling (/ bytes (float forj-usage-bytes-per-token))))

;;; A chat's counts

(defvar-local forj-usage-last nil
  "The last reply's usage plist, with :model and :cost (nil: no price known).")
(defvar-local forj-usage-session nil
  "The session's usage plist, with :cost, and :priced and :unpriced replies.")
(defvar-local forj-usage-basis nil
  "The usage of the last request of the conversation, for the next estimate.
nil once it no longer describes the conversation (a compaction, a
change of the context), until the next reply reports usage.")

(defun forj-usage-recorder (buffer provider)
  "A function that records the usage reports of one reply in BUFFER.
PROVIDER is the reply's provider.  A provider may report a reply's
usage in several pieces (Anthropic: at its start and its end) or
several times (Gemini: with each piece); each report holds the reply's
usage so far, so only what is new goes into the session."
  (let ((seen nil))
    (lambda (usage)
      (when (buffer-live-p buffer)
        (with-current-buffer buffer
          (forj-usage--record provider usage seen)
          (setq seen usage)
          (force-mode-line-update))))))

(defun forj-usage--record (provider usage before)
  "Record USAGE of PROVIDER's reply, replacing BEFORE, its earlier report."
  (let* ((model (plist-get provider :model))
         (cost (forj-usage-cost model usage))
         (old-cost (and before (forj-usage-cost model before)))
         (delta (cl-loop for key in '(:input :output :cache-read :cache-write)
                         append (list key (- (plist-get usage key)
                                             (or (plist-get before key) 0)))))
         (session (forj-usage-add forj-usage-session delta)))
    (setq forj-usage-last (append usage (list :model model :cost cost))
          forj-usage-basis usage
          forj-usage-session
          (append session
                  (list :cost (+ (or (plist-get forj-usage-session :cost) 0)
                                 (- (or cost 0) (or old-cost 0)))
                        :priced (+ (or (plist-get forj-usage-session :priced) 0)
                                   (if (and cost (null before)) 1 0))
                        :unpriced (+ (or (plist-get forj-usage-session :unpriced) 0)
                                     (if (and (null cost) (null before)) 1 0)))))))

;;; The header line

(defun forj-usage-format-tokens (n)
  "N tokens, short: 950, 12.3k, 1.2M."
  (cond ((< n 1000) (number-to-string n))
        ((< n 1000000) (format "%.1fk" (/ n 1000.0)))
        (t (format "%.1fM" (/ n 1e6)))))

(defun forj-usage-format-cost (cost)
  "COST in dollars, with the precision small sums need."
  (cond ((null cost) "$?")
        ((< cost 0.01) (format "$%.4f" cost))
        ((< cost 1) (format "$%.3f" cost))
        (t (format "$%.2f" cost))))

(defun forj-usage--counts (usage)
  "USAGE as \"in N out N cached N\"."
  (format "in %s out %s cached %s"
          (forj-usage-format-tokens (forj-usage-prompt usage))
          (forj-usage-format-tokens (plist-get usage :output))
          (forj-usage-format-tokens (plist-get usage :cache-read))))

;;; Tool calls

(defcustom forj-usage-show-tool-metrics t
  "Non-nil shows the chat's tool calls and failures in its header line.
The worker counts them per chat; the count is asked for each time the
chat's record changes."
  :type 'boolean
  :group 'forj)

(defvar-local forj-usage-tool-metrics nil
  "The worker's counters for this chat's tool calls (a plist), or nil.")

(defvar-local forj-usage--metrics-pending nil
  "Non-nil while a request for this chat's counters is under way.")

(declare-function forj-worker-get "forj-worker" (root))
(declare-function forj-worker-connection "forj-worker" (worker))
(declare-function forj-epc-live-p "forj-epc" (conn))
(declare-function forj-epc-call "forj-epc" (conn method body &rest keys))
(declare-function forj-tools-session-id "forj-tools" ())

(defun forj-usage-refresh-tool-metrics ()
  "Ask this chat's worker, without waiting, for the chat's tool-call counters.
Does nothing when `forj-usage-show-tool-metrics' is nil, when no worker
runs, or while an earlier request is under way."
  (let* ((root (forj-session-current-root))
         (worker (and forj-usage-show-tool-metrics root (not forj-usage--metrics-pending)
                      (forj-worker-get root)))
         (conn (and worker (forj-worker-connection worker)))
         (buffer (current-buffer)))
    (when (and conn (forj-epc-live-p conn))
      (setq forj-usage--metrics-pending t)
      (forj-epc-call conn "metrics" (list :session (forj-tools-session-id))
                     :timeout 30
                     :success (lambda (reply)
                                (when (buffer-live-p buffer)
                                  (with-current-buffer buffer
                                    (setq forj-usage--metrics-pending nil
                                          forj-usage-tool-metrics (plist-get reply :session))
                                    (force-mode-line-update))))
                     :error (lambda (_)
                              (when (buffer-live-p buffer)
                                (with-current-buffer buffer
                                  (setq forj-usage--metrics-pending nil))))))))

(add-hook 'forj-chat-record-changed-hook #'forj-usage-refresh-tool-metrics)

(defun forj-usage-tools-header ()
  "The header line's tool-call part: tools N, with failures if any; or nil."
  (let ((calls (plist-get forj-usage-tool-metrics :calls))
        (errors (or (plist-get forj-usage-tool-metrics :errors) 0)))
    (when (and forj-usage-show-tool-metrics (natnump calls) (> calls 0))
      (if (and (natnump errors) (> errors 0))
          (format "tools %d (%d failed)" calls errors)
        (format "tools %d" calls)))))

(defun forj-usage-header (provider estimate estimated)
  "The header line's usage part for a chat with PROVIDER.
ESTIMATE is the tokens the next request will hold; ESTIMATED non-nil
means they were estimated from bytes rather than counted."
  (let* ((window (forj-usage-context-window provider))
         (share (format "context %s%d%% of %s"
                        (if estimated "≈" "")
                        (round (* 100.0 (/ (float estimate) (max window 1))))
                        (forj-usage-format-tokens window))))
    (let ((tools (forj-usage-tools-header)))
      (when tools (setq share (concat share " · " tools))))
    (if (null forj-usage-last)
        share
      (let ((session forj-usage-session))
        (format "%s · last: %s %s · session: %s %s"
                share
                (forj-usage--counts forj-usage-last)
                (forj-usage-format-cost (plist-get forj-usage-last :cost))
                (forj-usage--counts session)
                (let ((priced (or (plist-get session :priced) 0))
                      (unpriced (or (plist-get session :unpriced) 0)))
                  (cond ((zerop priced) "$?")
                        ((zerop unpriced) (forj-usage-format-cost (plist-get session :cost)))
                        (t (format "%s + %d unpriced"
                                   (forj-usage-format-cost (plist-get session :cost)) unpriced)))))))))

(provide 'forj-usage)
;;; forj-usage.el ends here
