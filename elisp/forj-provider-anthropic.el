;;; forj-provider-anthropic.el --- Anthropic Messages API  -*- lexical-binding: t; -*-

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

;; The `anthropic' family: the Messages API with "stream": true.  Named
;; events: message_start, content_block_start (text or tool_use),
;; content_block_delta (text_delta, or input_json_delta carrying a
;; native call's arguments in pieces), content_block_stop,
;; message_delta, message_stop; `error' events carry the provider's
;; own message.  Roles must alternate, so consecutive messages of one
;; role are merged.
;;
;; Thinking blocks (`thinking', its text and signature streamed by
;; thinking_delta and signature_delta; `redacted_thinking', whole) are
;; kept with the native call that follows them (its :native) and sent
;; back unchanged before it, as Anthropic requires when thinking is on.
;; stop_reason "pause_turn" is reported as a stop of kind `pause': the
;; loop asks again, and the model goes on with its turn.  Tool ids of
;; other providers are mapped to ids Anthropic accepts.
;;
;; Native calls are held until message_delta says why the reply ended:
;; with stop_reason "max_tokens" the last call's arguments may be cut,
;; and a cut call is reported as such, never as a call.  "refusal" (with
;; or without text before it) is reported as a refusal.

;;; Code:

(require 'cl-lib)
(require 'forj-provider)
(require 'forj-usage)

(defun forj-provider-anthropic--content (message)
  "The content blocks of MESSAGE."
  (pcase (plist-get message :role)
    ("user" (append (mapcar #'forj-provider-anthropic--document (plist-get message :context))
                    (list (list :type "text" :text (plist-get message :text)))))
    ("assistant"
     (let ((calls (plist-get message :calls)))
       (append
        ;; With thinking on, an assistant message that calls tools must
        ;; start with the thinking that led to its first call.
        (forj-provider-anthropic--thinking (car calls))
        (unless (string-empty-p (or (plist-get message :text) ""))
          (list (list :type "text" :text (plist-get message :text))))
        (cl-loop for call in calls
                 for first = t then nil
                 append (append
                         (unless first (forj-provider-anthropic--thinking call))
                         (list (list :type "tool_use" :id (forj-provider-anthropic--id (plist-get call :id))
                                     :name (plist-get call :name)
                                     :input (let ((args (plist-get call :args)))
                                              (if (or (null args) (stringp args)) (make-hash-table) args)))))))))
    ("tool"
     (mapcar (lambda (result)
               (list :type "tool_result" :tool_use_id (forj-provider-anthropic--id (plist-get result :id))
                     :content (plist-get result :content)))
             (plist-get message :results)))))

(defun forj-provider-anthropic--id (id)
  "ID as Anthropic takes it (letters, digits, `_' and `-').
Ids other providers made, such as \"functions.read_file:0\", are
mapped to valid ones, the same way for a call and its result."
  (forj-provider-safe-id id "\\`[A-Za-z0-9_-]+\\'" 64))

(defun forj-provider-anthropic--thinking (call)
  "The thinking blocks Anthropic sent before CALL, unchanged, as a list."
  (let ((native (plist-get call :native)))
    (and (consp native) (equal (plist-get native :family) "anthropic")
         (append (plist-get native :before) nil))))

(defun forj-provider-anthropic--thinking-param (provider)
  "The thinking parameter of PROVIDER's :thinking, or nil."
  (let ((thinking (plist-get provider :thinking)))
    (cond ((numberp thinking) (list :type "enabled" :budget_tokens thinking))
          ((memq thinking '(adaptive t)) (list :type "adaptive")))))

(defun forj-provider-anthropic--messages (messages)
  "MESSAGES as Messages API messages, one role at a time."
  (let ((out nil))
    (dolist (message messages)
      (let ((role (if (equal (plist-get message :role) "assistant") "assistant" "user"))
            (content (forj-provider-anthropic--content message)))
        (when content
          (if (and out (equal (plist-get (car out) :role) role))
              (setcar out (list :role role :content (append (plist-get (car out) :content) content)))
            (push (list :role role :content content) out)))))
    (vconcat (mapcar (lambda (m) (list :role (plist-get m :role) :content (vconcat (plist-get m :content))))
                     (nreverse out)))))

(defun forj-provider-anthropic--request (provider system messages tools)
  "The Messages request for PROVIDER with SYSTEM, MESSAGES and TOOLS."
  (list :url (concat (string-remove-suffix "/" (plist-get provider :url)) "/messages")
        :headers (list "anthropic-version: 2023-06-01")
        :secret-headers (and (plist-get provider :key)
                             (list (concat "x-api-key: " (plist-get provider :key))))
        :body (forj-provider-json-encode
               (append (list :model (plist-get provider :model)
                             :max_tokens (or (plist-get provider :max-tokens)
                                             (let ((budget (plist-get provider :thinking)))
                                               ;; The budget is part of max_tokens.
                                               (if (numberp budget) (+ budget 8192) 8192)))
                             :stream t
                             :system (forj-provider-anthropic--system system)
                             :messages (forj-provider-anthropic--cache-last
                                        (forj-provider-anthropic--messages messages)))
                       (let ((thinking (forj-provider-anthropic--thinking-param provider)))
                         (and thinking (list :thinking thinking)))
                       (when tools
                         (list :tools
                               (forj-provider-anthropic--cache-last
                                (mapcar (lambda (tool)
                                          (list :name (plist-get tool :name)
                                                :description (plist-get tool :description)
                                                :input_schema (plist-get tool :parameters)))
                                        tools))))))))

(defun forj-provider-anthropic--event (stream event data)
  "Turn one EVENT with DATA of STREAM into actions."
  (let* ((json (forj-provider-json data))
         (type (or (plist-get json :type) event)))
    (pcase type
      ("content_block_start"
       (let ((block (plist-get json :content_block)))
         (pcase (plist-get block :type)
           ("tool_use"
            (forj-provider-set-state stream :tool
                                     (list :id (plist-get block :id) :name (plist-get block :name)
                                           :json "" :input (plist-get block :input)
                                           :before (forj-provider-state stream :thinking)))
            (forj-provider-set-state stream :thinking nil))
           ;; Thinking is kept whole, to go back before the call it led to.
           ((or "thinking" "redacted_thinking")
            (forj-provider-set-state stream :block block)))
         (when (and (equal (plist-get block :type) "text") (stringp (plist-get block :text)))
           (list (list :text (plist-get block :text))))))
      ("content_block_delta"
       (let ((delta (plist-get json :delta))
             (block (forj-provider-state stream :block)))
         (pcase (plist-get delta :type)
           ("text_delta" (list (list :text (plist-get delta :text))))
           ("thinking_delta"
            (when block
              (forj-provider-set-state
               stream :block (plist-put block :thinking (concat (plist-get block :thinking)
                                                                (plist-get delta :thinking)))))
            nil)
           ("signature_delta"
            (when block
              (forj-provider-set-state
               stream :block (plist-put block :signature (concat (let ((known (plist-get block :signature)))
                                                                   (if (stringp known) known ""))
                                                                 (plist-get delta :signature)))))
            nil)
           ("input_json_delta"
            (let ((tool (forj-provider-state stream :tool)))
              (when tool
                (forj-provider-set-state stream :tool
                                         (plist-put tool :json (concat (plist-get tool :json)
                                                                       (plist-get delta :partial_json))))))
            nil))))
      ("content_block_stop"
       (let ((tool (forj-provider-state stream :tool))
             (block (forj-provider-state stream :block)))
         (when block
           (forj-provider-set-state stream :block nil)
           (forj-provider-set-state stream :thinking
                                    (append (forj-provider-state stream :thinking) (list block))))
         (when tool
           (forj-provider-set-state stream :tool nil)
           (forj-provider-set-state stream :calls
                                    (append (forj-provider-state stream :calls) (list tool))))
         nil))
      ("message_delta"
       (let ((reason (plist-get (plist-get json :delta) :stop_reason)))
         (when (stringp reason)
           (forj-provider-anthropic--ended stream reason))))
      ("message_stop"
       (append (forj-provider-anthropic--ended stream nil) (list (list :done))))
      ("error" (list (list :error (forj-provider-reported-error data))))
      (_ nil))))

(defun forj-provider-anthropic--ended (stream reason)
  "The actions for the end of STREAM's reply, which ended for REASON.
The calls held are released, but a call the token limit cut is not."
  (let* ((calls (forj-provider-state stream :calls))
         (open (forj-provider-state stream :tool))
         (cut (and (member reason '("max_tokens" "model_context_window_exceeded"))
                   (or open
                       (let ((last (car (last calls))))
                         (and last (stringp (forj-provider-parse-args (plist-get last :json)))
                              last)))))
         (whole (remq cut calls)))
    (forj-provider-set-state stream :calls nil)
    (forj-provider-set-state stream :tool nil)
    (append
     (mapcar (lambda (tool)
               (list :call (append
                            (list :id (plist-get tool :id) :name (plist-get tool :name)
                                  ;; A server may give the input whole at the block's
                                  ;; start, with no input_json_delta after it.
                                  :args (let ((input (plist-get tool :input)))
                                          (if (and (string-empty-p (plist-get tool :json))
                                                   (consp input))
                                              input
                                            (forj-provider-parse-args (plist-get tool :json)))))
                            (and (plist-get tool :before)
                                 (list :native (list :family "anthropic"
                                                     :before (vconcat (plist-get tool :before))))))))
             whole)
     (pcase reason
       ((or "max_tokens" "model_context_window_exceeded")
        (list (list :stop (append (list :kind 'length :reason reason)
                                  (and cut (list :cut-call (plist-get cut :name)))))))
       ("refusal"
        (list (list :stop (list :kind 'refusal
                                :reason "stop_reason \"refusal\": Anthropic's safety system stopped the reply"))))
       ("pause_turn"
        (list (list :stop (list :kind 'pause
                                :reason "stop_reason \"pause_turn\": Anthropic paused a long turn"))))))))

(defconst forj-provider-anthropic--breakpoint '(:type "ephemeral")
  "The cache_control of a prompt caching breakpoint.")

(defun forj-provider-anthropic--document (item)
  "The context ITEM (:title :text) as a document block with a text source."
  (list :type "document"
        :source (list :type "text" :media_type "text/plain" :data (plist-get item :text))
        :title (plist-get item :title)))

(defun forj-provider-anthropic--system (system)
  "SYSTEM as one text block, cached: it is the same on every request."
  (vector (list :type "text" :text system :cache_control forj-provider-anthropic--breakpoint)))

(defun forj-provider-anthropic--cache-last (items)
  "ITEMS (a list or vector) as a vector whose last element is a cache breakpoint.
For the tools, the breakpoint caches all of them; for the messages,
it is put on the last content block, so the whole conversation so far
is cached and the next request reads it back at the cache price."
  (let ((items (vconcat items)))
    (when (> (length items) 0)
      (let* ((index (1- (length items)))
             (last (aref items index)))
        (aset items index
              (if (plist-get last :role)
                  (let ((content (vconcat (plist-get last :content))))
                    (when (> (length content) 0)
                      (aset content (1- (length content))
                            (append (aref content (1- (length content)))
                                    (list :cache_control forj-provider-anthropic--breakpoint))))
                    (list :role (plist-get last :role) :content content))
                (append last (list :cache_control forj-provider-anthropic--breakpoint))))))
    items))

(defun forj-provider-anthropic--usage (stream json)
  "The usage action for the event JSON of STREAM, if it reports usage.
message_start carries the prompt's tokens (input_tokens excludes what
was read from or written to the cache), message_delta the reply's
output so far; STREAM keeps what both said."
  (let ((usage (or (plist-get (plist-get json :message) :usage) (plist-get json :usage))))
    (when (consp usage)
      (let ((known (forj-provider-state stream :usage)))
        (dolist (key '(:input_tokens :output_tokens :cache_read_input_tokens
                                     :cache_creation_input_tokens))
          (when (numberp (plist-get usage key))
            (setq known (plist-put known key (plist-get usage key)))))
        (forj-provider-set-state stream :usage known)
        (list (list :usage (forj-usage-make
                            :input (plist-get known :input_tokens)
                            :output (plist-get known :output_tokens)
                            :cache-read (plist-get known :cache_read_input_tokens)
                            :cache-write (plist-get known :cache_creation_input_tokens))))))))

(defun forj-provider-anthropic--event-and-usage (stream event data)
  "The actions of STREAM's EVENT with DATA, the reply's usage included."
  (append (forj-provider-anthropic--event stream event data)
          (and (string-match-p "\"usage\"" data)
               (forj-provider-anthropic--usage stream (ignore-errors (forj-provider-json data))))))

(forj-provider-register-family
 'anthropic
 :request #'forj-provider-anthropic--request
 :event #'forj-provider-anthropic--event-and-usage
 :error-message #'forj-provider-error-message)

(provide 'forj-provider-anthropic)
;;; forj-provider-anthropic.el ends here
