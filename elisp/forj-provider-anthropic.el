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
;; Native calls are held until message_delta says why the reply ended:
;; with stop_reason "max_tokens" the last call's arguments may be cut,
;; and a cut call is reported as such, never as a call.  "refusal" (with
;; or without text before it) is reported as a refusal.

;;; Code:

(require 'cl-lib)
(require 'forj-provider)

(defun forj-provider-anthropic--content (message)
  "The content blocks of MESSAGE."
  (pcase (plist-get message :role)
    ("user" (list (list :type "text" :text (plist-get message :text))))
    ("assistant"
     (append (unless (string-empty-p (or (plist-get message :text) ""))
               (list (list :type "text" :text (plist-get message :text))))
             (mapcar (lambda (call)
                       (list :type "tool_use" :id (plist-get call :id) :name (plist-get call :name)
                             :input (let ((args (plist-get call :args)))
                                      (if (or (null args) (stringp args)) (make-hash-table) args))))
                     (plist-get message :calls))))
    ("tool"
     (mapcar (lambda (result)
               (list :type "tool_result" :tool_use_id (plist-get result :id)
                     :content (plist-get result :content)))
             (plist-get message :results)))))

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
                             :max_tokens (or (plist-get provider :max-tokens) 8192)
                             :stream t
                             :system system
                             :messages (forj-provider-anthropic--messages messages))
                       (when tools
                         (list :tools
                               (vconcat
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
         (when (equal (plist-get block :type) "tool_use")
           (forj-provider-set-state stream :tool (list :id (plist-get block :id)
                                                       :name (plist-get block :name)
                                                       :json "")))
         (when (and (equal (plist-get block :type) "text") (stringp (plist-get block :text)))
           (list (list :text (plist-get block :text))))))
      ("content_block_delta"
       (let ((delta (plist-get json :delta)))
         (pcase (plist-get delta :type)
           ("text_delta" (list (list :text (plist-get delta :text))))
           ("input_json_delta"
            (let ((tool (forj-provider-state stream :tool)))
              (when tool
                (forj-provider-set-state stream :tool
                                         (plist-put tool :json (concat (plist-get tool :json)
                                                                       (plist-get delta :partial_json))))))
            nil))))
      ("content_block_stop"
       (let ((tool (forj-provider-state stream :tool)))
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
      ("error" (list (list :error (or (forj-provider-error-message data) data))))
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
               (list :call (list :id (plist-get tool :id) :name (plist-get tool :name)
                                 :args (forj-provider-parse-args (plist-get tool :json)))))
             whole)
     (pcase reason
       ((or "max_tokens" "model_context_window_exceeded")
        (list (list :stop (append (list :kind 'length :reason reason)
                                  (and cut (list :cut-call (plist-get cut :name)))))))
       ("refusal"
        (list (list :stop (list :kind 'refusal
                                :reason "stop_reason \"refusal\": Anthropic's safety system stopped the reply"))))))))

(forj-provider-register-family
 'anthropic
 :request #'forj-provider-anthropic--request
 :event #'forj-provider-anthropic--event
 :error-message #'forj-provider-error-message)

(provide 'forj-provider-anthropic)
;;; forj-provider-anthropic.el ends here
